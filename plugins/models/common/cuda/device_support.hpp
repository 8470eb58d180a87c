// What the CUDA units share (units.cpp, gpt_units.cpp, llama_units.cpp):
// the per-thread stream with its cuBLAS handle and cuBLASLt plans, device
// arrays, operands that may be ordinary host memory or kept in 16 bits,
// row-major GEMMs with their epilogues, the exchanges of tensor
// parallelism and the twin-wrapping base unit.
// Internal to libtessera_cuda_units.so; everything is inline.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cuda_check.hpp"
#include "device_kernels.hpp"
#include "matmul.hpp"
#include "tessera/models/cuda_units.hpp"
#include "tessera/models/tensor_parallel.hpp"

namespace tessera::model::cuda {

// A stream, a cuBLAS handle on it and cuBLASLt's plans (with their
// workspace), per thread and device, the run's precision of matrix
// products, and scratch for their 16-bit inputs. Device memory comes from
// the device's stream-ordered pool (the caching allocator: see
// DeviceArray) where the device has one.
struct Lane {
  // cuBLASLt's workspace: what NVIDIA recommends for Hopper, enough for
  // every algorithm of earlier devices too.
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  int32_t device = 0;
  const tessera_host_api* host = nullptr;  // the rank's (its log)
  bool pooled = false;                     // cudaMallocAsync from the device's default pool
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  Matmuls matmuls;
  bool cublaslt = true;       // false: every product through cuBLAS (TESSERA_CUBLASLT=0)
  void* workspace = nullptr;  // kWorkspaceBytes, made at the first product
  tessera_dtype precision = TESSERA_F32;
  bool tf32 = false;  // f32 products on the TF32 tensor cores
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  Lane() = default;
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;
  ~Lane() {
    for (void* ptr : {scratch, workspace}) {
      if (ptr != nullptr) pooled ? cudaFreeAsync(ptr, stream) : cudaFree(ptr);
    }
    if (blas != nullptr) cublasDestroy(blas);
    if (stream != nullptr) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
  }
  // At least `bytes` of device scratch, usable on `stream`.
  void* ensure_scratch(size_t bytes, const std::string& unit);
  // `bytes` of device memory usable on `stream` (in stream order) and, once
  // the stream has been synchronised, anywhere; and its release after the
  // work queued on `stream` so far.
  void* allocate(size_t bytes, const std::string& unit) const {
    void* ptr = nullptr;
    check(pooled ? cudaMallocAsync(&ptr, bytes, stream) : cudaMalloc(&ptr, bytes), unit,
          pooled ? "cudaMallocAsync" : "cudaMalloc");
    return ptr;
  }
  void release(void* ptr, const std::string& unit) const {
    if (ptr == nullptr) return;
    check(pooled ? cudaFreeAsync(ptr, stream) : cudaFree(ptr), unit,
          pooled ? "cudaFreeAsync" : "cudaFree");
  }
};

// Makes `device`'s default memory pool a cache: memory freed into it stays
// reserved for the next allocation instead of going back to the driver at
// every synchronisation (the pool's default release threshold is 0).
// False when the device has no stream-ordered pools.
inline bool keep_pool(int32_t device, const std::string& unit) {
  int supported = 0;
  check(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device), unit,
        "cudaDeviceGetAttribute");
  if (supported == 0) return false;
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, device), unit, "cudaDeviceGetDefaultMemPool");
  uint64_t keep = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), unit,
        "cudaMemPoolSetAttribute");
  return true;
}

// Makes the rank's device current and returns this thread's lane on it.
inline Lane& lane(const sdk::Host& host, const std::string& unit) {
  const tessera_device device = host.compute_device();
  TESSERA_CHECK(device.type == TESSERA_DEVICE_CUDA, TESSERA_ERR_UNSUPPORTED, "unit '", unit,
                "' computes on CUDA, but this rank's device is the CPU");
  check(cudaSetDevice(device.index), unit, "cudaSetDevice");
  thread_local std::map<int32_t, std::unique_ptr<Lane>> lanes;
  std::unique_ptr<Lane>& slot = lanes[device.index];
  if (!slot) {
    auto made = std::make_unique<Lane>();
    made->device = device.index;
    made->pooled = keep_pool(device.index, unit);
    check(cudaStreamCreateWithFlags(&made->stream, cudaStreamNonBlocking), unit,
          "cudaStreamCreate");
    check(cublasCreate(&made->blas), unit, "cublasCreate");
    check(cublasSetStream(made->blas, made->stream), unit, "cublasSetStream");
    made->matmuls.init(unit);
    // TESSERA_CUBLASLT=0 sends every product through cuBLAS and the
    // units' kernels, unfused: the other side of a comparison of the two.
    const char* setting = std::getenv("TESSERA_CUBLASLT");
    made->cublaslt = setting == nullptr || std::string_view(setting) != "0";
    if (!made->cublaslt) {
      host.info("unit '", unit, "': TESSERA_CUBLASLT=0: every product of this thread's lane ",
                "through cuBLAS and the units' kernels, no epilogue fused");
    }
    slot = std::move(made);
    slot->precision = -1;  // the math mode is set below
  }
  slot->host = host.raw();
  const tessera_dtype precision = host.compute_precision();
  const bool tf32 = precision == TESSERA_F32 && host.compute_tf32();
  if (slot->precision != precision || slot->tf32 != tf32) {
    // Plain f32 products (no TF32), so results follow the CPU's to
    // rounding, unless the run asks for TF32; bf16 and f16 products on the
    // tensor cores, accumulated in f32.
    const cublasMath_t mode = tf32                       ? CUBLAS_TF32_TENSOR_OP_MATH
                              : precision != TESSERA_F32 ? CUBLAS_DEFAULT_MATH
                                                         : CUBLAS_PEDANTIC_MATH;
    check(cublasSetMathMode(slot->blas, mode), unit, "cublasSetMathMode");
    slot->precision = precision;
    slot->tf32 = tf32;
  }
  return *slot;
}

inline void* Lane::ensure_scratch(size_t bytes, const std::string& unit) {
  if (bytes > scratch_bytes) {
    // In stream order: the products queued before still read the old one.
    release(scratch, unit);
    scratch = nullptr;
    scratch_bytes = 0;
    scratch = allocate(bytes, unit);
    scratch_bytes = bytes;
  }
  return scratch;
}

// Device memory that grows and is kept (a context's activations), from
// the device's pool, so that contexts made and dropped step after step
// (activation checkpointing, strategies that free them) reuse memory
// without a cudaMalloc or a device synchronisation; or `managed` memory
// the host may read too (what a unit hands back). Every unit call
// synchronises its stream before it returns, so between calls an array
// holds no pending work and may be used from any thread's stream.
class DeviceArray {
 public:
  explicit DeviceArray(bool managed = false) : managed_(managed) {}
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (data_ == nullptr) return;
    if (!pooled_) {
      cudaFree(data_);
      return;
    }
    // Nothing is queued on it (see above): back to its device's pool.
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) current = device_;
    cudaSetDevice(device_);
    cudaFreeAsync(data_, cudaStreamPerThread);
    cudaSetDevice(current);
  }
  template <typename T = float>
  T* ensure(size_t count, const Lane& l, const std::string& unit) {
    const size_t bytes = count * sizeof(T);
    if (bytes > bytes_) {
      if (pooled_) {
        l.release(data_, unit);  // after the work queued on the lane's stream
      } else if (data_ != nullptr) {
        check(cudaFree(data_), unit, "cudaFree");  // managed, or a device without pools
      }
      data_ = nullptr;
      bytes_ = 0;
      if (managed_) {
        check(cudaMallocManaged(&data_, bytes), unit, "cudaMallocManaged");
      } else {
        data_ = l.allocate(bytes, unit);
        pooled_ = l.pooled;
        device_ = l.device;
      }
      bytes_ = bytes;
    }
    return static_cast<T*>(data_);
  }
  template <typename T = float>
  [[nodiscard]] T* get() const noexcept {
    return static_cast<T*>(data_);
  }
  [[nodiscard]] size_t bytes() const noexcept { return bytes_; }
  // Gives the memory back now (to the pool, after the work queued on the
  // lane's stream): what a context need not keep between its calls.
  void release(const Lane& l, const std::string& unit) {
    if (data_ == nullptr) return;
    if (pooled_) {
      l.release(data_, unit);
    } else {
      check(cudaFree(data_), unit, "cudaFree");
    }
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  bool managed_;
  bool pooled_ = false;  // from `device_`'s pool (cudaMallocAsync)
  int32_t device_ = 0;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Gives `arrays` back to the pool (DeviceArray::release): what a context
// need not keep for its next call. The end of a backward_input releases
// what the weight half does not read, so a context waiting for its weight
// half (zero-bubble pipelines) keeps only the products' inputs and output
// gradients and the norms' parameter gradients.
inline void release_all(std::initializer_list<DeviceArray*> arrays, const Lane& l,
                        const std::string& unit) {
  for (DeviceArray* a : arrays) a->release(l, unit);
}

// An operand of a product (see gemm): f32, or already rounded to the
// 16-bit type of the lane's precision (see KeptOperand).
struct In {
  const void* data = nullptr;
  bool rounded = false;
  // NOLINTNEXTLINE(google-explicit-constructor): an f32 array is an operand as it is
  In(const float* f32) : data(f32) {}
  In(const void* ptr, bool is_rounded) : data(ptr), rounded(is_rounded) {}
};

// The type a lane's products take their inputs in, and its 16-bit
// activations are kept in: bf16 or f16, or f32 under f32 and tf32.
inline Elem kept_elem(const Lane& l) noexcept {
  return l.precision == TESSERA_F16    ? Elem::f16
         : l.precision == TESSERA_BF16 ? Elem::bf16
                                       : Elem::f32;
}

// `count` floats rounded to `elem` (bf16 or f16) into `out`.
inline void round_to(Elem elem, const float* in, void* out, int64_t count, cudaStream_t stream) {
  (elem == Elem::f16 ? to_f16 : to_bf16)(in, out, count, stream);
}

// An activation kept in 16 bits under bf16 or f16 precision, in f32 under
// f32 or tf32. Either it is written in f32 and rounded once (f32(), then
// keep(): the f32 array goes back to the pool), or a kernel writes it in
// its kept type (store()). The products read it as it is kept (operand()),
// without rounding it again.
//
// Those the backward reads only as a product's operand (a norm's output, a
// GELU's or SwiGLU's output, a dense layer's input) come out the same bit
// for bit: every product rounds its inputs to 16 bits anyway. The
// attention's q, k, v and output are kept so too, as autocast keeps a
// linear layer's output: the attention computes in f32 from the rounded
// q, k and v, and its backward reads its rounded output.
class KeptOperand {
 public:
  // Where the activation is written, f32, before keep().
  DeviceArray& f32() noexcept { return full_; }
  // The `count` floats written: under 16-bit precision rounded, the f32
  // array released.
  void keep(size_t count, const Lane& l, const std::string& unit) {
    elem_ = kept_elem(l);
    if (elem_ == Elem::f32) {
      half_.release(l, unit);
      return;
    }
    void* half = half_.ensure<uint16_t>(count, l, unit);
    round_to(elem_, full_.get(), half, static_cast<int64_t>(count), l.stream);
    full_.release(l, unit);
  }
  // Room for `count` elements of the kept type, for a kernel to write.
  void* store(size_t count, const Lane& l, const std::string& unit) {
    elem_ = kept_elem(l);
    if (elem_ == Elem::f32) {
      half_.release(l, unit);
      return full_.ensure(count, l, unit);
    }
    full_.release(l, unit);
    return half_.ensure<uint16_t>(count, l, unit);
  }
  [[nodiscard]] In operand() const noexcept {
    return elem_ != Elem::f32 ? In(half_.get<void>(), true) : In(full_.get());
  }
  // Its element type, and where its element `index` is.
  [[nodiscard]] Elem elem() const noexcept { return elem_; }
  [[nodiscard]] const void* at(int64_t index) const noexcept {
    return static_cast<const char*>(operand().data) +
           index * static_cast<int64_t>(elem_ == Elem::f32 ? sizeof(float) : kBf16Bytes);
  }
  void release(const Lane& l, const std::string& unit) {
    full_.release(l, unit);
    half_.release(l, unit);
  }
  [[nodiscard]] size_t bytes() const noexcept { return full_.bytes() + half_.bytes(); }

 private:
  DeviceArray full_;
  DeviceArray half_;
  Elem elem_ = Elem::f32;
};

// Whether the device reads `ptr` in place (device or managed memory).
inline bool device_readable(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

// `count` floats at `ptr` as the device reads them: `ptr` itself, or a
// copy in `staging` when it is ordinary host memory.
inline const float* readable(const float* ptr, size_t count, DeviceArray& staging, const Lane& l,
                             const std::string& unit) {
  if (ptr == nullptr || device_readable(ptr)) return ptr;
  float* copy = staging.ensure(count, l, unit);
  check(cudaMemcpyAsync(copy, ptr, count * sizeof(float), cudaMemcpyHostToDevice, l.stream), unit,
        "cudaMemcpyAsync");
  return copy;
}

// A gradient the unit adds into: in place, or through a device copy of it
// that finish() copies back to the host buffer.
class GradTarget {
 public:
  GradTarget(float* grad, size_t count, DeviceArray& staging, const Lane& l,
             const std::string& unit)
      : host_(grad), count_(count) {
    if (device_readable(grad)) {
      device_ = grad;
      host_ = nullptr;
      return;
    }
    device_ = staging.ensure(count, l, unit);
    check(cudaMemcpyAsync(device_, grad, count * sizeof(float), cudaMemcpyHostToDevice, l.stream),
          unit, "cudaMemcpyAsync");
  }
  [[nodiscard]] float* device() const noexcept { return device_; }
  void finish(const Lane& l, const std::string& unit) const {
    if (host_ == nullptr) return;
    check(cudaMemcpyAsync(host_, device_, count_ * sizeof(float), cudaMemcpyDeviceToHost, l.stream),
          unit, "cudaMemcpyAsync");
  }

 private:
  float* host_;
  float* device_ = nullptr;
  size_t count_;
};

// The floats of a parameter of `spec` on a rank of a tensor-parallel group
// of `parts` ranks: a split parameter's shard, a replicated one whole.
inline size_t local_numel(const ParamSpec& spec, int32_t parts) {
  const int64_t n = spec.numel();
  return static_cast<size_t>(spec.split == SplitHint::none || parts <= 1 ? n : n / parts);
}

// Device views of a unit's parameters, staged where they are host memory;
// `parts`: the ranks of the tensor-parallel group the unit splits its
// parameters over (1: whole).
class Operands {
 public:
  void bind(std::span<const float* const> params, std::span<const ParamSpec> specs, const Lane& l,
            const std::string& unit, int32_t parts = 1) {
    if (staging_.size() != params.size()) {
      staging_ = std::vector<DeviceArray>(params.size());
    }
    ptr_.assign(params.size(), nullptr);
    for (size_t i = 0; i < params.size(); ++i) {
      ptr_[i] = readable(params[i], local_numel(specs[i], parts), staging_[i], l, unit);
    }
  }
  const float* operator[](size_t i) const noexcept { return ptr_[i]; }

 private:
  std::vector<DeviceArray> staging_;
  std::vector<const float*> ptr_;
};

// Device targets of a unit's gradients, copied back to host memory at
// finish(); `parts` as for Operands.
class GradTargets {
 public:
  void bind(std::span<float* const> grads, std::span<const ParamSpec> specs, const Lane& l,
            const std::string& unit, int32_t parts = 1) {
    if (staging_.size() != grads.size()) staging_ = std::vector<DeviceArray>(grads.size());
    targets_.clear();
    for (size_t i = 0; i < grads.size(); ++i) {
      targets_.emplace_back(grads[i], local_numel(specs[i], parts), staging_[i], l, unit);
    }
  }
  float* operator[](size_t i) const noexcept { return targets_[i].device(); }
  void finish(const Lane& l, const std::string& unit) const {
    for (const GradTarget& t : targets_) t.finish(l, unit);
  }

 private:
  std::vector<DeviceArray> staging_;
  std::vector<GradTarget> targets_;
};

inline void copy_device(float* to, const float* from, size_t count, const Lane& l,
                        const std::string& unit) {
  if (count == 0) return;
  check(cudaMemcpyAsync(to, from, count * sizeof(float), cudaMemcpyDefault, l.stream), unit,
        "cudaMemcpyAsync");
}

// `rows` rows of `width` floats from `from` (rows `from_stride` floats
// apart) to `to` (rows `to_stride` apart): a block of columns of a matrix.
inline void copy_columns(float* to, int64_t to_stride, const float* from, int64_t from_stride,
                         int64_t rows, int64_t width, const Lane& l, const std::string& unit) {
  if (rows == 0 || width == 0) return;
  constexpr auto kFloat = static_cast<int64_t>(sizeof(float));
  check(cudaMemcpy2DAsync(to, static_cast<size_t>(to_stride * kFloat), from,
                          static_cast<size_t>(from_stride * kFloat),
                          static_cast<size_t>(width * kFloat), static_cast<size_t>(rows),
                          cudaMemcpyDefault, l.stream),
        unit, "cudaMemcpy2DAsync");
}

// The batch's token ids (or targets) in [0, bound), uploaded into `to`;
// one outside is refused as "<what> <id> <at> <index> is outside [0,
// bound)" (`at`: "at position", "of row").
inline const int32_t* upload_ids(std::span<const int32_t> ids, int64_t bound, const char* what,
                                 const char* at, DeviceArray& to, const Lane& l,
                                 const std::string& unit) {
  for (size_t r = 0; r < ids.size(); ++r) {
    TESSERA_CHECK(ids[r] >= 0 && ids[r] < bound, TESSERA_ERR_INVALID_ARGUMENT, "unit '", unit,
                  "': ", what, " ", ids[r], " ", at, " ", r, " is outside [0, ", bound, ")");
  }
  auto* device = to.ensure<int32_t>(ids.size(), l, unit);
  if (!ids.empty()) {
    check(cudaMemcpyAsync(device, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                          l.stream),
          unit, "cudaMemcpyAsync");
  }
  return device;
}

// C[M,N] = alpha·op(A)·op(B) + beta·C, row-major, then `e` (see Epilogue
// in matmul.hpp), through cuBLASLt's column-major product on the
// transposes (Cᵀ = op(B)ᵀ·op(A)ᵀ), the epilogue fused into it. A and B are
// contiguous (their leading dimension is their row length). Under bf16
// (f16) precision both are rounded to bfloat16 (float16) first and the
// product is accumulated in f32 into the f32 C. Where cuBLASLt has no
// algorithm for it, the product goes through cuBLAS and the epilogue
// through the units' kernels, which compute the same.
inline void gemm(Lane& l, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 In a, int64_t lda, In b, int64_t ldb, float beta, float* c, int64_t ldc,
                 const std::string& unit, const Epilogue& e = {}) {
  if (m == 0 || n == 0) return;
  TESSERA_CHECK((e.kind == Fused::none && e.residual == nullptr) || ldc == n, TESSERA_ERR_INTERNAL,
                "unit '", unit, "': a fused epilogue needs a contiguous output");
  TESSERA_CHECK(e.residual == nullptr || beta == 0.0f, TESSERA_ERR_INTERNAL, "unit '", unit,
                "': a product with a residual cannot accumulate");
  const void* a_in = a.data;
  const void* b_in = b.data;
  cudaDataType_t type = CUDA_R_32F;
  if (const Elem elem = kept_elem(l); elem != Elem::f32) {
    // The operands not rounded yet, rounded into the lane's scratch.
    const int64_t a_count = a.rounded ? 0 : (trans_a ? k : m) * lda;
    const int64_t b_count = b.rounded ? 0 : (trans_b ? n : k) * ldb;
    constexpr int64_t kAlign = 128;  // elements: 256 bytes between the two inputs
    const int64_t b_at = (a_count + kAlign - 1) / kAlign * kAlign;
    if (a_count + b_count > 0) {
      auto* scratch = static_cast<char*>(
          l.ensure_scratch(static_cast<size_t>(b_at + b_count) * kBf16Bytes, unit));
      if (a_count > 0) {
        round_to(elem, static_cast<const float*>(a.data), scratch, a_count, l.stream);
        a_in = scratch;
      }
      if (b_count > 0) {
        void* b16 = scratch + static_cast<size_t>(b_at) * kBf16Bytes;
        round_to(elem, static_cast<const float*>(b.data), b16, b_count, l.stream);
        b_in = b16;
      }
    }
    type = elem == Elem::f16 ? CUDA_R_16F : CUDA_R_16BF;
  } else {
    TESSERA_CHECK(!a.rounded && !b.rounded, TESSERA_ERR_INTERNAL, "unit '", unit,
                  "': a 16-bit operand of an f32 product");
  }
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  LtProduct p;
  p.op_a = op_a;
  p.op_b = op_b;
  p.m = n;
  p.n = m;
  p.k = k;
  p.a = b_in;
  p.lda = ldb;
  p.b = a_in;
  p.ldb = lda;
  p.type = type;
  p.compute = l.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  p.alpha = alpha;
  p.beta = e.residual != nullptr ? 1.0f : beta;
  p.c = e.residual != nullptr ? e.residual : c;
  p.d = c;
  p.ldd = ldc;
  switch (e.kind) {
    case Fused::none:
      p.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
      break;
    case Fused::bias:
      p.epilogue = CUBLASLT_EPILOGUE_BIAS;
      p.bias = e.bias;
      break;
    case Fused::gelu_bias:
      p.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
      p.bias = e.bias;
      break;
    case Fused::dgelu:
      p.epilogue = CUBLASLT_EPILOGUE_DGELU;
      break;
  }
  if (e.kind == Fused::gelu_bias || e.kind == Fused::dgelu) {
    p.aux = e.aux;
    p.aux_ld = ldc;
  }
  if (l.cublaslt && l.workspace == nullptr) {
    l.workspace = l.allocate(Lane::kWorkspaceBytes, unit);
  }
  std::string refusal;
  if (l.cublaslt && l.matmuls.run(p, l.stream, l.workspace, Lane::kWorkspaceBytes, unit, refusal)) {
    return;
  }
  if (!refusal.empty()) {
    sdk::Host(l.host).info("unit '", unit, "': cuBLASLt has no algorithm for ", refusal,
                           ": through cuBLAS and the units' kernels");
  }
  // cuBLAS writes the product where the epilogue's kernel reads it: the
  // GELU's input is `aux`.
  float* out = e.kind == Fused::gelu_bias ? e.aux : c;
  if (type == CUDA_R_32F) {
    check(cublasSgemm(l.blas, op_a, op_b, static_cast<int>(n), static_cast<int>(m),
                      static_cast<int>(k), &alpha, static_cast<const float*>(b_in),
                      static_cast<int>(ldb), static_cast<const float*>(a_in), static_cast<int>(lda),
                      &beta, out, static_cast<int>(ldc)),
          unit, "cublasSgemm");
  } else {
    check(cublasGemmEx(l.blas, op_a, op_b, static_cast<int>(n), static_cast<int>(m),
                       static_cast<int>(k), &alpha, b_in, type, static_cast<int>(ldb), a_in, type,
                       static_cast<int>(lda), &beta, out, CUDA_R_32F, static_cast<int>(ldc),
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          unit, "cublasGemmEx");
  }
  switch (e.kind) {
    case Fused::none:
    case Fused::bias:
      if (e.bias != nullptr || e.residual != nullptr) {
        bias_residual(c, e.bias, e.residual, m, n, l.stream);
      }
      break;
    case Fused::gelu_bias:
      bias_activation(e.aux, e.bias, c, m, n, Act::gelu, l.stream);
      break;
    case Fused::dgelu:
      activation_backward(e.aux, c, c, m * n, Act::gelu, l.stream);
      break;
  }
}

inline void finish_call(const Lane& l, const std::string& unit) {
  check(cudaStreamSynchronize(l.stream), unit, "cudaStreamSynchronize");
}

// The input rows of a unit in `saved` (device memory): the batch's features
// when first, else the previous unit's output, `width` columns.
inline int64_t take_input(const Unit& unit, int64_t width, const UnitInput& input,
                          DeviceArray& saved, const Lane& l) {
  const std::string& name = unit.name();
  const float* from = nullptr;
  int64_t rows = 0;
  if (unit.is_first()) {
    TESSERA_CHECK(
        input.batch != nullptr && !input.batch->is_sequence() && input.batch->features == width,
        TESSERA_ERR_INVALID_ARGUMENT, "unit '", name, "': needs a classification batch with ",
        width, " features");
    from = input.batch->inputs.data();
    rows = input.batch->size;
  } else {
    TESSERA_CHECK(!input.x.empty() && input.x.cols == width, TESSERA_ERR_INVALID_ARGUMENT, "unit '",
                  name, "': input has ", input.x.cols, " columns, expected ", width);
    from = input.x.data;
    rows = input.x.rows;
  }
  const auto count = static_cast<size_t>(rows * width);
  float* to = saved.ensure(count, l, name);
  if (count > 0) {
    check(cudaMemcpyAsync(to, from, count * sizeof(float), cudaMemcpyDefault, l.stream), name,
          "cudaMemcpyAsync");
  }
  return rows;
}

// A unit's output gradient must be rows×cols.
inline void check_output_gradient(const Unit& unit, ConstView grad_output, int64_t rows,
                                  int64_t cols) {
  TESSERA_CHECK(grad_output.rows == rows && grad_output.cols == cols && !grad_output.empty(),
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", unit.name(), "': output gradient is ",
                grad_output.rows, "x", grad_output.cols, ", expected ", rows, "x", cols);
}

// A unit's output gradient as the device reads it (a copy in `staging`
// when it is ordinary host memory).
inline const float* output_gradient(const Unit& unit, ConstView grad_output, int64_t rows,
                                    int64_t cols, DeviceArray& staging, const Lane& l) {
  check_output_gradient(unit, grad_output, rows, cols);
  return readable(grad_output.data, static_cast<size_t>(rows * cols), staging, l, unit.name());
}

// A copy of a unit's output gradient in `keep`, from device or host
// memory alike: the weight half reads it after the caller may have reused
// its buffer.
inline float* kept_output_gradient(const Unit& unit, ConstView grad_output, int64_t rows,
                                   int64_t cols, DeviceArray& keep, const Lane& l) {
  check_output_gradient(unit, grad_output, rows, cols);
  const auto count = static_cast<size_t>(rows * cols);
  float* p = keep.ensure(count, l, unit.name());
  copy_device(p, grad_output.data, count, l, unit.name());
  return p;
}

// `count` floats of `a`, zeroed in stream order: a sum the unit adds into.
inline float* zeroed(DeviceArray& a, size_t count, const Lane& l, const std::string& unit) {
  float* p = a.ensure(count, l, unit);
  if (count > 0) {
    check(cudaMemsetAsync(p, 0, count * sizeof(float), l.stream), unit, "cudaMemsetAsync");
  }
  return p;
}

// Sums `count` floats of the unit's device memory at `data` over the
// group, in place; nothing without a group. A backend that takes the
// device's buffers (nccl) sums them where they are; for any other the sum
// goes through `exchange` (managed memory, which the host reads). The
// lane's work so far is synchronised first.
inline void allreduce_device(const TpGroup& tp, float* data, size_t count, DeviceArray& exchange,
                             const Lane& l, std::string_view what, const std::string& unit) {
  if (!tp.active() || count == 0) return;
  if (tp.on_device()) {
    finish_call(l, unit);
    tp.allreduce_sum(data, static_cast<int64_t>(count), what);
    return;
  }
  float* buffer = exchange.ensure(count, l, unit);
  copy_device(buffer, data, count, l, unit);
  finish_call(l, unit);
  tp.allreduce_sum(buffer, static_cast<int64_t>(count), what);
  copy_device(data, buffer, count, l, unit);
}

// The token rows of sequence parallelism on the device (see TpGroup's
// gather_rows and scatter_rows_sum): `examples` groups of rows, each split
// into size() slices of `rows` rows, `width` floats a row. The rows are
// arranged on the device. A backend that takes the device's buffers
// (nccl) reads and writes the unit's device memory and `blocks` (pool
// memory) where they are; for any other, what goes through the group is
// managed memory (`send`, `recv`), which the host reads. Like the staging
// of host operands, these buffers are not in a context's bytes() (not
// activations).
struct RowExchange {
  DeviceArray send{true}, recv{true};
  DeviceArray blocks;
};

// full [examples · size() · rows, width] from every rank's `local`
// [examples · rows, width] (rank k's slice at positions [k · rows, (k+1) ·
// rows) of each example). Without sequence parallelism `local` is whole
// already: copied (unless it is `full`).
inline void rows_to_whole_device(const TpGroup& tp, const float* local, int64_t examples,
                                 int64_t rows, int64_t width, float* full, RowExchange& x,
                                 const Lane& l, std::string_view what, const std::string& unit) {
  const int64_t slice = rows * width;
  const auto count = static_cast<size_t>(examples * slice);
  if (!tp.sequence()) {
    if (full != local) copy_device(full, local, count, l, unit);
    return;
  }
  const int32_t p = tp.size();
  const float* send = local;
  float* blocks = nullptr;
  if (tp.on_device()) {
    blocks = x.blocks.ensure(count * static_cast<size_t>(p), l, unit);
  } else {
    float* staged = x.send.ensure(count, l, unit);
    copy_device(staged, local, count, l, unit);
    send = staged;
    blocks = x.recv.ensure(count * static_cast<size_t>(p), l, unit);
  }
  finish_call(l, unit);
  tp.allgather(send, examples * slice, blocks, what);
  // Block k of the allgather is rank k's slices of every example.
  for (int32_t k = 0; k < p; ++k) {
    copy_columns(full + k * slice, p * slice, blocks + k * examples * slice, slice, examples, slice,
                 l, unit);
  }
}

// This rank's rows `local` [examples · rows, width] of the sum over the
// group of `partial` [examples · size() · rows, width]: a reduce-scatter
// under sequence parallelism; else an allreduce of all the rows (see
// allreduce_device), copied into `local` unless it is `partial`.
inline void partial_to_rows_device(const TpGroup& tp, float* partial, int64_t examples,
                                   int64_t rows, int64_t width, float* local, RowExchange& x,
                                   const Lane& l, std::string_view what, const std::string& unit) {
  const int64_t slice = rows * width;
  const auto count = static_cast<size_t>(examples * slice);
  if (!tp.sequence()) {
    allreduce_device(tp, partial, count, x.send, l, what, unit);
    if (local != partial) copy_device(local, partial, count, l, unit);
    return;
  }
  const int32_t p = tp.size();
  float* blocks =
      (tp.on_device() ? x.blocks : x.send).ensure(count * static_cast<size_t>(p), l, unit);
  for (int32_t k = 0; k < p; ++k) {
    copy_columns(blocks + k * examples * slice, slice, partial + k * slice, p * slice, examples,
                 slice, l, unit);
  }
  finish_call(l, unit);
  if (tp.on_device()) {
    tp.reduce_scatter_sum(blocks, examples * slice, local, what);
    return;
  }
  float* mine = x.recv.ensure(count, l, unit);
  tp.reduce_scatter_sum(blocks, examples * slice, mine, what);
  copy_device(local, mine, count, l, unit);
}

// The rows of a transformer unit's call in a tensor-parallel group:
// `batch` examples of `seq` positions, this rank's `local_seq` of each
// (all of them without sequence parallelism), rows `d` wide; the partial
// sums of the products split over the group in `partial` (device memory
// of the context), what goes through the group in `exchange`.
struct BlockRows {
  const TpGroup& tp;
  int64_t batch;
  int64_t seq;
  int64_t local_seq;
  int64_t d;
  DeviceArray& partial;
  RowExchange& exchange;
  Lane& l;
  const std::string& unit;

  [[nodiscard]] int64_t all() const noexcept { return batch * seq; }
  [[nodiscard]] int64_t mine() const noexcept { return batch * local_seq; }
  // Where the whole rows' partial sums of `out` (this rank's rows) go:
  // `out` itself when this rank holds every row.
  [[nodiscard]] float* partial_for(float* out) const {
    return tp.sequence() ? partial.ensure(static_cast<size_t>(all() * d), l, unit) : out;
  }
  // `out` (this rank's rows) = the sum over the group of the partial sums
  // `z` (from partial_for(out)).
  void sum_partial(float* z, float* out, std::string_view what) const {
    partial_to_rows_device(tp, z, batch, local_seq, d, out, exchange, l, what, unit);
  }
  // The whole rows `whole` from this rank's `rows` (see rows_to_whole_device).
  void to_whole(const float* rows, float* whole, std::string_view what) const {
    rows_to_whole_device(tp, rows, batch, local_seq, d, whole, exchange, l, what, unit);
  }
  // A norm whose output feeds column-parallel products: norm(out) writes
  // this rank's rows of it to `out`, which is `whole` itself when this rank
  // holds every row, else `scratch`, gathered whole into `whole`.
  template <typename Norm>
  void norm_to_whole(DeviceArray& scratch, float* whole, std::string_view what, Norm&& norm) const {
    float* out = tp.sequence() ? scratch.ensure(static_cast<size_t>(mine() * d), l, unit) : whole;
    norm(out);
    to_whole(out, whole, what);
  }
  // y (this rank's rows) = in·w + bias + residual for a row-parallel w
  // ([width, d], this rank's rows) over the whole rows `in`; bias (d
  // floats) and residual (this rank's rows of y's shape) may be null. The
  // partial sums are summed before the bias and the residual are added;
  // with the whole w, both are fused into the product.
  void row_parallel(In in, const float* w, int64_t width, float* y, std::string_view what,
                    const float* bias, const float* residual) const {
    if (tp.size() <= 1) {
      gemm(l, false, false, all(), d, width, 1.0f, in, width, w, d, 0.0f, y, d, unit,
           {.kind = bias != nullptr ? Fused::bias : Fused::none,
            .bias = bias,
            .residual = residual});
      return;
    }
    float* z = partial_for(y);
    gemm(l, false, false, all(), d, width, 1.0f, in, width, w, d, 0.0f, z, d, unit);
    sum_partial(z, y, what);
    bias_residual(y, bias, residual, mine(), d, l.stream);
  }
  // dh (this rank's rows) = dz·wᵀ for a column-parallel w ([d, width], this
  // rank's columns) over the whole rows.
  void column_input_gradient(const float* dz, const float* w, int64_t width, float* dh,
                             std::string_view what) const {
    float* z = partial_for(dh);
    gemm(l, false, true, all(), d, width, 1.0f, dz, width, w, width, 0.0f, z, d, unit);
    sum_partial(z, dh, what);
  }
};

// The softmax cross-entropy a head ends with, of logits [rows, cols]
// against the device `targets`: the probabilities into `probs`, and the
// loss summed over the rows times `scale` into *host_loss (read once
// finish_call has synchronised the stream). `mx` and `sums` (managed) are
// the split cross-entropy's exchanges with the group.
struct CrossEntropyArrays {
  DeviceArray probs, row_loss, loss_out;
  DeviceArray mx{true}, sums{true};
};
// The rows' losses in a.row_loss summed, times `scale`, into *host_loss.
inline void copy_loss(Lane& l, int64_t rows, float scale, CrossEntropyArrays& a, float* host_loss,
                      const std::string& unit) {
  float* loss = a.loss_out.ensure(1, l, unit);
  sum_loss(a.row_loss.get<double>(), rows, static_cast<double>(scale), loss, l.stream);
  check(cudaMemcpyAsync(host_loss, loss, sizeof(float), cudaMemcpyDeviceToHost, l.stream), unit,
        "cudaMemcpyAsync");
}
inline float* cross_entropy(Lane& l, const float* logits, const int32_t* targets, int64_t rows,
                            int64_t cols, float scale, CrossEntropyArrays& a, float* host_loss,
                            const std::string& unit) {
  const auto un = static_cast<size_t>(rows);
  float* probs = a.probs.ensure(un * cols, l, unit);
  softmax_xent(logits, targets, rows, cols, probs, a.row_loss.ensure<double>(un, l, unit),
               l.stream);
  copy_loss(l, rows, scale, a, host_loss, unit);
  return probs;
}

// The same over logits whose columns are split between the ranks of
// `group`: `logits` [rows, cols] are this rank's columns [lo, lo + cols)
// of the whole rows (see row_max in device_kernels.hpp); the row maxima,
// and then the sums of exponentials with the target logits, are
// allreduced. Every rank gets the whole loss; the probabilities are its
// columns'.
inline float* parallel_cross_entropy(Lane& l, const TpGroup& group, const float* logits,
                                     const int32_t* targets, int64_t rows, int64_t cols, int64_t lo,
                                     float scale, CrossEntropyArrays& a, float* host_loss,
                                     const std::string& unit) {
  const auto un = static_cast<size_t>(rows);
  float* mx = a.mx.ensure(un, l, unit);
  row_max(logits, rows, cols, mx, l.stream);
  finish_call(l, unit);
  group.allreduce_max(mx, rows, "the logits' row maxima");
  float* probs = a.probs.ensure(un * cols, l, unit);
  float* sums = a.sums.ensure(2 * un, l, unit);
  exp_sums(logits, targets, rows, cols, lo, mx, probs, sums, l.stream);
  finish_call(l, unit);
  group.allreduce_sum(sums, 2 * rows, "the softmax sums and target logits");
  xent_normalize(probs, sums, mx, rows, cols, a.row_loss.ensure<double>(un, l, unit), l.stream);
  copy_loss(l, rows, scale, a, host_loss, unit);
  return probs;
}

// The scalar output gradient of a head (1 when none is given), wherever it is.
inline float loss_gradient(ConstView grad_output, const std::string& unit) {
  float g = 1.0f;
  if (!grad_output.empty()) {
    check(cudaMemcpy(&g, grad_output.data, sizeof(float), cudaMemcpyDefault), unit, "cudaMemcpy");
  }
  return g;
}

// A transformer unit's batch: sequences.
inline void require_sequences(const Unit& unit, const UnitInput& input) {
  TESSERA_CHECK(input.batch != nullptr && input.batch->is_sequence(), TESSERA_ERR_INVALID_ARGUMENT,
                "unit '", unit.name(), "': needs a sequence batch");
}

// The previous unit's output [batch·seq, d], copied into `saved`.
// Under sequence parallelism (`positions`: the positions of each example
// this rank holds; else the whole seq_len) the previous unit's rows of
// this rank, [batch·positions, d].
inline int64_t take_rows(const Unit& unit, int64_t d, const UnitInput& input, DeviceArray& saved,
                         const Lane& l, int64_t positions = -1) {
  const int64_t n = input.batch->size * (positions < 0 ? input.batch->seq_len : positions);
  TESSERA_CHECK(!input.x.empty() && input.x.rows == n && input.x.cols == d,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", unit.name(), "': input is ", input.x.rows,
                "x", input.x.cols, ", expected ", n, "x", d);
  copy_device(saved.ensure(static_cast<size_t>(n * d), l, unit.name()), input.x.data,
              static_cast<size_t>(n * d), l, unit.name());
  return n;
}

inline Act act_of(UnitActivation a) noexcept {
  return a == UnitActivation::relu ? Act::relu : a == UnitActivation::gelu ? Act::gelu : Act::none;
}

// What the CUDA units share: the twin that gives name, parameters, cost and
// initialisation, and the split backward. Every CUDA unit splits its
// backward pass (TESSERA_UNIT_SPLIT_BACKWARD,
// for zero-bubble pipelines): backward_input computes the input gradient
// and keeps what the weight half needs in the context (the output
// gradients of the products, the norms' gain gradients summed over the
// rows); backward_weight adds the parameter gradients. The whole backward
// is the two in order, so both ways give the same gradients bit for bit.
class TwinnedUnit : public Unit {
 public:
  TwinnedUnit(const tessera_host_api* host, std::unique_ptr<Unit> twin)
      : Unit(twin->name(), twin->is_first(), twin->is_last()), host_(host), twin_(std::move(twin)) {
    specs_.assign(twin_->params().begin(), twin_->params().end());
  }
  [[nodiscard]] UnitCost cost() const override { return twin_->cost(); }
  void init(std::span<float* const> params, uint64_t seed) const override {
    twin_->init(params, seed);
  }
  // Every CUDA unit splits over a tensor-parallel group as its twin does,
  // in tensor and sequence mode, and checks a group's size as it does.
  [[nodiscard]] uint32_t flags() const noexcept override {
    constexpr uint32_t kSplits = TESSERA_UNIT_TENSOR_PARALLEL | TESSERA_UNIT_SEQUENCE_PARALLEL;
    return TESSERA_UNIT_SPLIT_BACKWARD | (twin_->flags() & kSplits);
  }
  void check_tensor_parallel(int32_t size, uint32_t flags) const override {
    twin_->check_tensor_parallel(size, flags);
  }
  ConstView backward(UnitContext& ctx, std::span<const float* const> params,
                     std::span<float* const> grads, ConstView grad_output) const final {
    check_counts(params.size(), grads.size());
    const ConstView grad_input = backward_input(ctx, params, grad_output);
    backward_weight(ctx, params, grads);
    return grad_input;
  }

 protected:
  void check_counts(size_t params, size_t grads) const {
    TESSERA_CHECK(params == specs_.size() && (grads == 0 || grads == specs_.size()),
                  TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': expected ", specs_.size(),
                  " parameter buffers, got ", params);
  }
  // backward_input's check that a forward ran on the context.
  void require_forward(bool ran) const {
    TESSERA_CHECK(ran, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                  "': backward without a forward on this context");
  }
  // backward_weight's check that backward_input ran since the forward, and
  // its mark that the context's input half is used up.
  void take_input_half(bool& done) const {
    TESSERA_CHECK(done, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                  "': backward_weight without backward_input on this context");
    done = false;
  }
  sdk::Host host_;

 private:
  std::unique_ptr<Unit> twin_;
};

// The gpt units (gpt_units.cpp), as UnitFactory hands them out.
std::unique_ptr<Unit> make_gpt_embedding(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                         int64_t vocab, int64_t d, int64_t seq_len);
std::unique_ptr<Unit> make_gpt_block(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                     int64_t d, int64_t heads, int64_t hidden);
std::unique_ptr<Unit> make_gpt_head(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                    int64_t vocab, int64_t d);

// The llama units: the block (llama_units.cpp); the embedding without
// positions and the head with RMSNorm are gpt's (gpt_units.cpp).
std::unique_ptr<Unit> make_llama_embedding(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                           int64_t vocab, int64_t d, int64_t seq_len);
std::unique_ptr<Unit> make_llama_block(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                       const LlamaShape& shape);
std::unique_ptr<Unit> make_llama_head(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                      int64_t vocab, int64_t d, double norm_eps);

}  // namespace tessera::model::cuda

// Matrix products through cuBLASLt, with the step that follows a product
// (its bias, its GELU, its residual, the GELU's gradient) fused into the
// product's epilogue, so the product's output is written once instead of
// being read and written again by a kernel of its own. A plan (the
// descriptors and the algorithm cuBLASLt's heuristic picks) is made once
// per shape, types, epilogue and operand alignment, and kept. Where
// cuBLASLt has no algorithm for a product, the caller computes it with
// cuBLAS and the units' own kernels (see gemm in device_support.hpp).
// Internal to libtessera_cuda_units.so; everything is inline.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "cuda_check.hpp"

namespace tessera::model::cuda {

// What follows a product D = op(A)·op(B), row-major [m, n] (see gemm).
enum class Fused : int32_t {
  none,       // nothing
  bias,       // D[r, j] += bias[j]
  gelu_bias,  // aux = D + bias (the GELU's input, kept for backward); D = gelu(aux)
  dgelu,      // D = D ⊙ gelu'(aux): the GELU's input gradient from its output gradient
};
struct Epilogue {
  Fused kind = Fused::none;
  const float* bias = nullptr;  // bias, gelu_bias: n floats
  // gelu_bias: written; dgelu: read. Row-major [m, n] with D's leading dimension.
  float* aux = nullptr;
  // Added to the product, before the bias (D = op(A)·op(B) + residual +
  // bias): [m, n] with D's leading dimension; the product's beta must be 0.
  const float* residual = nullptr;
};

// The largest power of two up to 256 that divides `ptr`'s address: what
// cuBLASLt's heuristic must be told of an operand it does not see (it
// assumes 256-byte alignment otherwise).
inline uint32_t alignment_of(const void* ptr) noexcept {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// One product as cuBLASLt sees it: column-major, D [m, n] = alpha·op(A)·op(B)
// + beta·C, then the epilogue; C has D's layout (C is D when accumulating).
struct LtProduct {
  cublasOperation_t op_a = CUBLAS_OP_N;
  cublasOperation_t op_b = CUBLAS_OP_N;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  cudaDataType_t type = CUDA_R_32F;  // of A and B; C and D are f32
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  float alpha = 1.0f;
  float beta = 0.0f;
  const float* c = nullptr;
  float* d = nullptr;
  int64_t ldd = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const float* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};

// A lane's cuBLASLt handle and its plans.
class Matmuls {
 public:
  Matmuls() = default;
  Matmuls(const Matmuls&) = delete;
  Matmuls& operator=(const Matmuls&) = delete;
  ~Matmuls() {
    for (auto& [key, plan] : plans_) plan.destroy();
    if (handle_ != nullptr) cublasLtDestroy(handle_);
  }

  void init(const std::string& unit) { check(cublasLtCreate(&handle_), unit, "cublasLtCreate"); }

  // Runs `p` on `stream`; false, running nothing, when cuBLASLt has no
  // algorithm for it within `workspace_bytes` of `workspace`, and then,
  // the first time, why in `refusal`.
  bool run(const LtProduct& p, cudaStream_t stream, void* workspace, size_t workspace_bytes,
           const std::string& unit, std::string& refusal) {
    const void* c = p.beta != 0.0f && p.c != nullptr ? static_cast<const void*>(p.c) : p.d;
    Plan& plan = plan_for(p, c, workspace_bytes, unit);
    if (!plan.found) {
      if (!plan.reported) refusal = describe(p, plan.status);
      plan.reported = true;
      return false;
    }
    // The pointers change from call to call; their alignment, which the
    // plan's algorithm relies on, is part of its key.
    set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, unit);
    set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux, unit);
    const cublasStatus_t status =
        cublasLtMatmul(handle_, plan.desc, &p.alpha, p.a, plan.a, p.b, plan.b, &p.beta, c, plan.d,
                       p.d, plan.d, &plan.algo, workspace, workspace_bytes, stream);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
      // Refused at the call although the heuristic offered it: from now
      // on the product goes the other way, as where no algorithm is found.
      plan.found = false;
      plan.status = status;
      plan.reported = true;
      refusal = describe(p, status);
      return false;
    }
    check(status, unit, "cublasLtMatmul");
    return true;
  }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr;
    cublasLtMatrixLayout_t b = nullptr;
    cublasLtMatrixLayout_t d = nullptr;  // C's too
    cublasLtMatmulAlgo_t algo{};
    bool found = false;
    bool reported = false;                          // its refusal was handed to a caller
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;  // the heuristic's
    void destroy() noexcept {
      if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
      if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
      if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
      if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
    }
  };
  using Key = std::array<int64_t, 18>;

  template <typename T>
  static void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                  const T& value, const std::string& unit) {
    check(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)), unit,
          "cublasLtMatmulDescSetAttribute");
  }
  template <typename T>
  static void prefer(cublasLtMatmulPreference_t pref,
                     cublasLtMatmulPreferenceAttributes_t attribute, const T& value,
                     const std::string& unit) {
    check(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof(value)), unit,
          "cublasLtMatmulPreferenceSetAttribute");
  }

  Plan& plan_for(const LtProduct& p, const void* c, size_t workspace_bytes,
                 const std::string& unit) {
    const Key key{p.op_a,
                  p.op_b,
                  p.m,
                  p.n,
                  p.k,
                  p.lda,
                  p.ldb,
                  p.ldd,
                  p.type,
                  p.compute,
                  p.epilogue,
                  p.aux_ld,
                  alignment_of(p.a),
                  alignment_of(p.b),
                  alignment_of(c),
                  alignment_of(p.d),
                  p.bias == nullptr ? 0 : alignment_of(p.bias),
                  p.aux == nullptr ? 0 : alignment_of(p.aux)};
    auto [it, made] = plans_.try_emplace(key);
    if (!made) return it->second;
    Plan& plan = it->second;
    try {
      check(cublasLtMatmulDescCreate(&plan.desc, p.compute, CUDA_R_32F), unit,
            "cublasLtMatmulDescCreate");
      set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, p.op_a, unit);
      set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, p.op_b, unit);
      set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue, unit);
      // The heuristic reads the pointers' alignment from their values.
      set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, unit);
      set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux, unit);
      if (p.aux != nullptr) set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.aux_ld, unit);
      const bool a_n = p.op_a == CUBLAS_OP_N;
      const bool b_n = p.op_b == CUBLAS_OP_N;
      const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
      check(cublasLtMatrixLayoutCreate(&plan.a, p.type, u(a_n ? p.m : p.k), u(a_n ? p.k : p.m),
                                       p.lda),
            unit, "cublasLtMatrixLayoutCreate");
      check(cublasLtMatrixLayoutCreate(&plan.b, p.type, u(b_n ? p.k : p.n), u(b_n ? p.n : p.k),
                                       p.ldb),
            unit, "cublasLtMatrixLayoutCreate");
      check(cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_32F, u(p.m), u(p.n), p.ldd), unit,
            "cublasLtMatrixLayoutCreate");
      cublasLtMatmulPreference_t pref = nullptr;
      check(cublasLtMatmulPreferenceCreate(&pref), unit, "cublasLtMatmulPreferenceCreate");
      cublasLtMatmulHeuristicResult_t result{};
      int returned = 0;
      cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
      try {
        prefer(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{workspace_bytes}, unit);
        prefer(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(p.a), unit);
        prefer(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(p.b), unit);
        prefer(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(c), unit);
        prefer(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(p.d), unit);
        status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                                pref, 1, &result, &returned);
      } catch (...) {
        cublasLtMatmulPreferenceDestroy(pref);
        throw;
      }
      cublasLtMatmulPreferenceDestroy(pref);
      // No algorithm (an epilogue or a layout this device's cuBLASLt does
      // not take, say): the product goes through cuBLAS instead.
      plan.status = status != CUBLAS_STATUS_SUCCESS ? status : result.state;
      plan.found = status == CUBLAS_STATUS_SUCCESS && returned > 0 &&
                   result.state == CUBLAS_STATUS_SUCCESS && result.workspaceSize <= workspace_bytes;
      if (plan.found) plan.algo = result.algo;
    } catch (...) {
      plan.destroy();
      plans_.erase(it);
      throw;
    }
    return plan;
  }

  // "a [m x k]·[k x n] bf16 product with epilogue GELU_AUX_BIAS (status)".
  static std::string describe(const LtProduct& p, cublasStatus_t status) {
    const char* type = p.type == CUDA_R_16BF ? "bf16" : p.type == CUDA_R_16F ? "f16" : "f32";
    const char* epilogue = p.epilogue == CUBLASLT_EPILOGUE_BIAS            ? "BIAS"
                           : p.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? "GELU_AUX_BIAS"
                           : p.epilogue == CUBLASLT_EPILOGUE_DGELU         ? "DGELU"
                                                                           : "DEFAULT";
    return ::tessera::detail::concat("a [", p.m, " x ", p.k, "]·[", p.k, " x ", p.n, "] ", type,
                                     " product with epilogue ", epilogue, " (",
                                     cublasGetStatusString(status), ")");
  }

  cublasLtHandle_t handle_ = nullptr;
  std::map<Key, Plan> plans_;
};

}  // namespace tessera::model::cuda

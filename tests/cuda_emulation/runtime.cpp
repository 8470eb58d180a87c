// The emulation's CUDA runtime, cuBLAS and cuBLASLt over host memory (see
// include/cuda_runtime.h, include/cublas_v2.h and include/cublasLt.h).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

namespace {

struct Allocation {
  size_t bytes = 0;
  cudaMemoryType type = cudaMemoryTypeDevice;
};

std::mutex g_mutex;
std::map<const char*, Allocation> g_allocations;  // by start address
std::atomic<int> g_math_mode{CUBLAS_DEFAULT_MATH};
std::atomic<size_t> g_gemm_ex[3];  // 32F, 16F, 16BF
std::atomic<size_t> g_sgemm{0};
thread_local int t_device = 0;

cudaError_t remember(void** ptr, size_t bytes, cudaMemoryType type) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  // Filled with NaNs (all bits set), where a device leaves whatever was
  // there: a unit that reads memory before writing it shows in its results.
  *ptr = std::malloc(bytes > 0 ? bytes : 1);
  if (*ptr == nullptr) return cudaErrorMemoryAllocation;
  std::memset(*ptr, 0xff, bytes);
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_allocations[static_cast<const char*>(*ptr)] = {bytes, type};
  return cudaSuccess;
}

size_t bytes_of(cudaMemoryType type) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  size_t total = 0;
  for (const auto& [ptr, a] : g_allocations) {
    if (a.type == type) total += a.bytes;
  }
  return total;
}

int type_index(cudaDataType_t type) { return type == CUDA_R_32F ? 0 : type == CUDA_R_16F ? 1 : 2; }

float widen(const void* data, cudaDataType_t type, size_t index) {
  if (type == CUDA_R_32F) return static_cast<const float*>(data)[index];
  const uint16_t bits = static_cast<const uint16_t*>(data)[index];
  return type == CUDA_R_16BF ? __bfloat162float(__nv_bfloat16{bits}) : __half2float(__half{bits});
}

// C = alpha·op(A)·op(B) + beta·C, column-major, as cuBLAS defines it (C is
// not read when beta is 0).
cublasStatus_t gemm(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                    float alpha, const void* a, cudaDataType_t a_type, int lda, const void* b,
                    cudaDataType_t b_type, int ldb, float beta, float* c, int ldc) {
  if (m < 0 || n < 0 || k < 0 || ldc < m) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < (transa == CUBLAS_OP_N ? m : k) || ldb < (transb == CUBLAS_OP_N ? k : n)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double sum = 0.0;
      for (int l = 0; l < k; ++l) {
        const size_t ai = transa == CUBLAS_OP_N ? static_cast<size_t>(i) + size_t(l) * lda
                                                : static_cast<size_t>(l) + size_t(i) * lda;
        const size_t bi = transb == CUBLAS_OP_N ? static_cast<size_t>(l) + size_t(j) * ldb
                                                : static_cast<size_t>(j) + size_t(l) * ldb;
        sum += static_cast<double>(widen(a, a_type, ai)) * widen(b, b_type, bi);
      }
      float& out = c[static_cast<size_t>(i) + size_t(j) * ldc];
      const double before = beta == 0.0f ? 0.0 : static_cast<double>(beta) * out;
      out = static_cast<float>(alpha * sum + before);
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cublasOperation_t op_a = CUBLAS_OP_N;
  cublasOperation_t op_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const float* bias = nullptr;
  float* aux = nullptr;
  int64_t aux_ld = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t workspace = 0;
  uint32_t alignment[4] = {256, 256, 256, 256};  // A, B, C, D
};

namespace {

std::atomic<bool> g_lt_refuse{false};
std::atomic<bool> g_lt_refuse_calls{false};
std::atomic<size_t> g_lt_refusals{0};
std::atomic<size_t> g_lt_matmuls[4];  // DEFAULT, BIAS, GELU_AUX_BIAS, DGELU
std::atomic<size_t> g_lt_inputs[3];   // 32F, 16F, 16BF
std::atomic<int> g_lt_compute{CUBLAS_COMPUTE_32F};

int epilogue_index(cublasLtEpilogue_t epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      return 0;
    case CUBLASLT_EPILOGUE_BIAS:
      return 1;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return 2;
    case CUBLASLT_EPILOGUE_DGELU:
      return 3;
  }
  return -1;
}

uint32_t alignment(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// What cuBLASLt checks of a product's descriptors.
cublasStatus_t validate(const cublasLtMatmulDescOpaque_t& desc,
                        const cublasLtMatrixLayoutOpaque_t& a,
                        const cublasLtMatrixLayoutOpaque_t& b,
                        const cublasLtMatrixLayoutOpaque_t& c,
                        const cublasLtMatrixLayoutOpaque_t& d) {
  if (a.type != b.type || c.type != CUDA_R_32F || d.type != CUDA_R_32F) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a.type != CUDA_R_32F) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (c.rows != d.rows || c.cols != d.cols || c.ld != d.ld) return CUBLAS_STATUS_INVALID_VALUE;
  for (const auto* layout : {&a, &b, &d}) {
    if (layout->ld < static_cast<int64_t>(std::max<uint64_t>(layout->rows, 1))) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  const uint64_t m = d.rows;
  const uint64_t n = d.cols;
  const bool a_n = desc.op_a == CUBLAS_OP_N;
  const bool b_n = desc.op_b == CUBLAS_OP_N;
  const uint64_t k = a_n ? a.cols : a.rows;
  if ((a_n ? a.rows : a.cols) != m || (b_n ? b.rows : b.cols) != k ||
      (b_n ? b.cols : b.rows) != n) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const int index = epilogue_index(desc.epilogue);
  if (index < 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool needs_bias =
      desc.epilogue == CUBLASLT_EPILOGUE_BIAS || desc.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool needs_aux =
      desc.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || desc.epilogue == CUBLASLT_EPILOGUE_DGELU;
  if (needs_bias && desc.bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (needs_aux) {
    if (desc.aux == nullptr || desc.aux_ld < static_cast<int64_t>(m)) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (desc.aux_ld % 8 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// GELU's tanh form and its derivative, in double.
constexpr double kGeluC = 0.7978845608028654;  // sqrt(2/pi)
double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + 0.044715 * x * x * x))); }
double gelu_derivative(double x) {
  const double t = std::tanh(kGeluC * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * 0.044715 * x * x);
}

}  // namespace

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t err) { return cudaGetErrorName(err); }
cudaError_t cudaGetLastError() { return tessera::emu::take_last_error(); }
cudaError_t cudaSetDevice(int device) {
  if (device != 0) return cudaErrorInvalidValue;  // one emulated device
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int /*device*/) {
  switch (attr) {
    case cudaDevAttrMemoryPoolsSupported:
      *value = 1;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(tessera::emu::shared_optin_bytes());
      break;
  }
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0)
    return cudaErrorInvalidValue;
  return tessera::emu::set_max_dynamic_shared(kernel, static_cast<size_t>(value));
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int /*device*/) {
  *pool = reinterpret_cast<cudaMemPool_t>(0x10);
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t /*pool*/, cudaMemPoolAttr /*attr*/,
                                    void* /*value*/) {
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned /*flags*/) {
  *stream = reinterpret_cast<cudaStream_t>(new char);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t /*stream*/) { return cudaSuccess; }
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  return remember(ptr, bytes, cudaMemoryTypeDevice);
}
cudaError_t cudaMallocManaged(void** ptr, size_t bytes, unsigned /*flags*/) {
  return remember(ptr, bytes, cudaMemoryTypeManaged);
}
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t /*stream*/) {
  return remember(ptr, bytes, cudaMemoryTypeDevice);
}
cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    // Not memory of the emulation (or freed twice): what a device refuses.
    if (g_allocations.erase(static_cast<const char*>(ptr)) == 0) return cudaErrorInvalidValue;
  }
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t /*stream*/) { return cudaFree(ptr); }
cudaError_t cudaMemcpy(void* to, const void* from, size_t bytes, cudaMemcpyKind /*kind*/) {
  if (bytes > 0) std::memcpy(to, from, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* to, const void* from, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t /*stream*/) {
  return cudaMemcpy(to, from, bytes, kind);
}
cudaError_t cudaMemcpy2DAsync(void* to, size_t to_pitch, const void* from, size_t from_pitch,
                              size_t width, size_t height, cudaMemcpyKind /*kind*/,
                              cudaStream_t /*stream*/) {
  if (width > to_pitch || width > from_pitch) return cudaErrorInvalidValue;
  for (size_t r = 0; r < height; ++r) {
    std::memcpy(static_cast<char*>(to) + r * to_pitch,
                static_cast<const char*>(from) + r * from_pitch, width);
  }
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t /*stream*/) {
  if (bytes > 0) std::memset(ptr, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  *attributes = cudaPointerAttributes{};
  const auto* p = static_cast<const char*>(ptr);
  const std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_allocations.upper_bound(p);
  if (it == g_allocations.begin()) return cudaSuccess;
  --it;
  if (p < it->first + it->second.bytes) attributes->type = it->second.type;
  return cudaSuccess;
}

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = reinterpret_cast<cublasHandle_t>(new char);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete reinterpret_cast<char*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t /*handle*/, cudaStream_t /*stream*/) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t /*handle*/, cublasMath_t mode) {
  g_math_mode.store(mode);
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
cublasStatus_t cublasSgemm(cublasHandle_t /*handle*/, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const float* alpha,
                           const float* a, int lda, const float* b, int ldb, const float* beta,
                           float* c, int ldc) {
  g_sgemm.fetch_add(1);
  return gemm(transa, transb, m, n, k, *alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, *beta, c,
              ldc);
}
cublasStatus_t cublasGemmEx(cublasHandle_t /*handle*/, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType_t a_type, int lda, const void* b,
                            cudaDataType_t b_type, int ldb, const void* beta, void* c,
                            cudaDataType_t c_type, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t /*algo*/) {
  if (c_type != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F || a_type != b_type) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  g_gemm_ex[type_index(a_type)].fetch_add(1);
  return gemm(transa, transb, m, n, k, *static_cast<const float*>(alpha), a, a_type, lda, b, b_type,
              ldb, *static_cast<const float*>(beta), static_cast<float*>(c), ldc);
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = reinterpret_cast<cublasLtHandle_t>(new char);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<char*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (scale_type != CUDA_R_32F) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = new cublasLtMatmulDescOpaque_t{};
  (*desc)->compute = compute;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* buf, size_t bytes) {
  const auto take = [&](auto& field) {
    if (bytes != sizeof(field)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&field, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return take(desc->op_a);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return take(desc->op_b);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return take(desc->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return take(desc->bias);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return take(desc->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return take(desc->aux_ld);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* buf, size_t bytes) {
  if (attribute == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (bytes != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&pref->workspace, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
  }
  const int index = static_cast<int>(attribute) - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
  if (index < 0 || index > 3 || bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&pref->alignment[index], buf, bytes);
  return CUBLAS_STATUS_SUCCESS;
}
// The algorithm found records the alignments the heuristic was told (A, B,
// C, D from the preference; the bias's and aux's from their pointers).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t /*handle*/,
                                              cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  *returned = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t status = validate(*desc, *a, *b, *c, *d);
  if (status != CUBLAS_STATUS_SUCCESS || g_lt_refuse.load()) {
    g_lt_refusals.fetch_add(1);
    return status != CUBLAS_STATUS_SUCCESS ? status : CUBLAS_STATUS_NOT_SUPPORTED;
  }
  results[0] = cublasLtMatmulHeuristicResult_t{};
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = pref->alignment[i];
  results[0].algo.data[4] = desc->bias == nullptr ? 1 : alignment(desc->bias);
  results[0].algo.data[5] = desc->aux == nullptr ? 1 : alignment(desc->aux);
  results[0].workspaceSize = std::min<uint64_t>(pref->workspace, 1 << 20);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t /*handle*/, cublasLtMatmulDesc_t desc,
                              const void* alpha, const void* a, cublasLtMatrixLayout_t a_layout,
                              const void* b, cublasLtMatrixLayout_t b_layout, const void* beta,
                              const void* c, cublasLtMatrixLayout_t c_layout, void* d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t /*stream*/) {
  const cublasStatus_t status = validate(*desc, *a_layout, *b_layout, *c_layout, *d_layout);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (g_lt_refuse_calls.load()) return CUBLAS_STATUS_NOT_SUPPORTED;
  // An operand less aligned than the algorithm was chosen for.
  const void* operands[6] = {a, b, c, d, desc->bias, desc->aux};
  for (int i = 0; i < 6; ++i) {
    if (operands[i] != nullptr && alignment(operands[i]) < algo->data[i]) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  if (workspace == nullptr && workspace_bytes > 0) return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float*>(alpha);
  const float be = *static_cast<const float*>(beta);
  const uint64_t m = d_layout->rows;
  const uint64_t n = d_layout->cols;
  const bool a_n = desc->op_a == CUBLAS_OP_N;
  const bool b_n = desc->op_b == CUBLAS_OP_N;
  const uint64_t k = a_n ? a_layout->cols : a_layout->rows;
  const auto lda = static_cast<uint64_t>(a_layout->ld);
  const auto ldb = static_cast<uint64_t>(b_layout->ld);
  const auto ldd = static_cast<uint64_t>(d_layout->ld);
  const auto aux_ld = static_cast<uint64_t>(desc->aux_ld);
  auto* out = static_cast<float*>(d);
  const auto* in = static_cast<const float*>(c);
  for (uint64_t j = 0; j < n; ++j) {
    for (uint64_t i = 0; i < m; ++i) {
      double sum = 0.0;
      for (uint64_t l = 0; l < k; ++l) {
        const uint64_t ai = a_n ? i + l * lda : l + i * lda;
        const uint64_t bi = b_n ? l + j * ldb : j + l * ldb;
        sum += static_cast<double>(widen(a, a_layout->type, ai)) * widen(b, b_layout->type, bi);
      }
      double v = static_cast<double>(al) * sum;
      if (be != 0.0f) v += static_cast<double>(be) * in[i + j * ldd];
      switch (desc->epilogue) {
        case CUBLASLT_EPILOGUE_DEFAULT:
          break;
        case CUBLASLT_EPILOGUE_BIAS:
          v += desc->bias[i];
          break;
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
          v += desc->bias[i];
          desc->aux[i + j * aux_ld] = static_cast<float>(v);
          v = gelu(v);
          break;
        case CUBLASLT_EPILOGUE_DGELU:
          v *= gelu_derivative(desc->aux[i + j * aux_ld]);
          break;
      }
      out[i + j * ldd] = static_cast<float>(v);
    }
  }
  g_lt_matmuls[epilogue_index(desc->epilogue)].fetch_add(1);
  g_lt_inputs[type_index(a_layout->type)].fetch_add(1);
  g_lt_compute.store(desc->compute);
  return CUBLAS_STATUS_SUCCESS;
}

namespace tessera::emu {
size_t device_bytes_in_use() { return bytes_of(cudaMemoryTypeDevice); }
size_t managed_bytes_in_use() { return bytes_of(cudaMemoryTypeManaged); }
cublasMath_t last_math_mode() { return static_cast<cublasMath_t>(g_math_mode.load()); }
size_t gemm_ex_calls(cudaDataType_t type) { return g_gemm_ex[type_index(type)].load(); }
size_t sgemm_calls() { return g_sgemm.load(); }
void lt_refuse_all(bool refuse) { g_lt_refuse.store(refuse); }
void lt_refuse_calls(bool refuse) { g_lt_refuse_calls.store(refuse); }
size_t lt_matmuls(cublasLtEpilogue_t epilogue) {
  return g_lt_matmuls[epilogue_index(epilogue)].load();
}
size_t lt_refusals() { return g_lt_refusals.load(); }
size_t lt_inputs(cudaDataType_t type) { return g_lt_inputs[type_index(type)].load(); }
cublasComputeType_t last_lt_compute() {
  return static_cast<cublasComputeType_t>(g_lt_compute.load());
}
}  // namespace tessera::emu

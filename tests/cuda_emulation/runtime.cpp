// The emulation's CUDA runtime and cuBLAS over host memory (see
// include/cuda_runtime.h and include/cublas_v2.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
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

float widen(const void* data, cudaDataType_t type, size_t index) {
  if (type == CUDA_R_32F) return static_cast<const float*>(data)[index];
  const uint16_t bits = static_cast<const uint16_t*>(data)[index];
  if (type == CUDA_R_16BF) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f = 0.0f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
  // IEEE binary16.
  const uint32_t sign = (bits & 0x8000U) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fU;
  const uint32_t mantissa = bits & 0x3ffU;
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign != 0 ? -value : value;
  }
  const uint32_t u = sign | (exponent == 31 ? 0x7f800000U | (mantissa << 13)
                                            : ((exponent + 112) << 23) | (mantissa << 13));
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
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

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t err) { return cudaGetErrorName(err); }
cudaError_t cudaGetLastError() { return cudaSuccess; }
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
  *value = attr == cudaDevAttrMemoryPoolsSupported ? 1 : 0;
  return cudaSuccess;
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
  return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}
cublasStatus_t cublasSgemm(cublasHandle_t /*handle*/, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const float* alpha,
                           const float* a, int lda, const float* b, int ldb, const float* beta,
                           float* c, int ldc) {
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
  g_gemm_ex[a_type == CUDA_R_32F ? 0 : a_type == CUDA_R_16F ? 1 : 2].fetch_add(1);
  return gemm(transa, transb, m, n, k, *static_cast<const float*>(alpha), a, a_type, lda, b, b_type,
              ldb, *static_cast<const float*>(beta), static_cast<float*>(c), ldc);
}

namespace tessera::emu {
size_t device_bytes_in_use() { return bytes_of(cudaMemoryTypeDevice); }
size_t managed_bytes_in_use() { return bytes_of(cudaMemoryTypeManaged); }
cublasMath_t last_math_mode() { return static_cast<cublasMath_t>(g_math_mode.load()); }
size_t gemm_ex_calls(cudaDataType_t type) {
  return g_gemm_ex[type == CUDA_R_32F ? 0 : type == CUDA_R_16F ? 1 : 2].load();
}
}  // namespace tessera::emu

// bench_device.hpp over the CUDA runtime (linked statically: see
// apps/tessera/CMakeLists.txt).
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include <fmt/format.h>

#include "bench_device.hpp"
#include "tessera/core/device.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {

namespace {

// Throws Error(INTERNAL) "--device cuda: <call> failed on CUDA device <n>:
// <CUDA's error>" unless `err` is cudaSuccess.
void check_cuda(cudaError_t err, const char* call, int32_t ordinal) {
  if (err == cudaSuccess) return;
  throw Error(TESSERA_ERR_INTERNAL, fmt::format("--device cuda: {} failed on CUDA device {}: {}",
                                                call, ordinal, cudaGetErrorString(err)));
}

void use_device(int32_t ordinal) { check_cuda(cudaSetDevice(ordinal), "cudaSetDevice", ordinal); }

}  // namespace

bool cuda_built() noexcept { return true; }

int32_t cuda_device_count() {
  try {
    return device::cuda_device_count();
  } catch (const Error& e) {
    throw Error(e.status(), std::string("--device cuda: ") + e.what());
  }
}

CudaMemory::CudaMemory(int32_t ordinal, size_t bytes) : ordinal_(ordinal) {
  if (bytes == 0) return;
  use_device(ordinal);
  const cudaError_t err = cudaMalloc(&data_, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // reset the last error so it is not reported again later
    throw Error(TESSERA_ERR_OUT_OF_MEMORY,
                fmt::format("--device cuda: cannot allocate {} B on CUDA device {}: out of memory",
                            bytes, ordinal));
  }
  check_cuda(err, "cudaMalloc", ordinal);
  size_ = bytes;
}

CudaMemory::CudaMemory(CudaMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      ordinal_(other.ordinal_) {}

CudaMemory& CudaMemory::operator=(CudaMemory&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    ordinal_ = other.ordinal_;
  }
  return *this;
}

CudaMemory::~CudaMemory() { release(); }

void CudaMemory::release() noexcept {
  if (data_ == nullptr) return;
  (void)cudaSetDevice(ordinal_);
  (void)cudaFree(data_);  // a failure here has nobody to tell; the process ends soon after
  data_ = nullptr;
  size_ = 0;
}

void CudaMemory::upload(const void* host) {
  if (size_ == 0) return;
  use_device(ordinal_);
  check_cuda(cudaMemcpy(data_, host, size_, cudaMemcpyHostToDevice), "cudaMemcpy (to device)",
             ordinal_);
  // A copy from pageable memory may still be in flight on the device when
  // cudaMemcpy returns; a backend's own (non-blocking) stream would not wait
  // for it.
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", ordinal_);
}

void CudaMemory::download(void* host) const {
  if (size_ == 0) return;
  use_device(ordinal_);
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", ordinal_);
  check_cuda(cudaMemcpy(host, data_, size_, cudaMemcpyDeviceToHost), "cudaMemcpy (to host)",
             ordinal_);
}

}  // namespace tessera::cli

// tessera/core/device.hpp over the CUDA runtime, linked statically (see
// core/CMakeLists.txt).
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "tessera/core/device.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::device {
namespace {

std::string cuda_error_text(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

}  // namespace

bool cuda_built() noexcept { return true; }

int32_t cuda_device_count() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count <= 0) {
    (void)cudaGetLastError();
    throw Error(TESSERA_ERR_UNSUPPORTED,
                "no CUDA device (cudaGetDeviceCount: " +
                    (err != cudaSuccess ? cuda_error_text(err) : std::string("0 devices")) + ")");
  }
  return static_cast<int32_t>(count);
}

void* managed_alloc(int32_t ordinal, std::size_t bytes, std::string& error) noexcept {
  try {
    cudaError_t err = cudaSetDevice(ordinal);
    void* ptr = nullptr;
    if (err == cudaSuccess) err = cudaMallocManaged(&ptr, bytes, cudaMemAttachGlobal);
    if (err == cudaSuccess) {
      // Zeroed from the host, where the caller (TrackedBuffer) touches it
      // first anyway: no device-wide synchronisation per allocation.
      std::memset(ptr, 0, bytes);
      return ptr;
    }
    (void)cudaGetLastError();
    if (ptr != nullptr) (void)cudaFree(ptr);
    error = "cudaMallocManaged of " + std::to_string(bytes) + " B on CUDA device " +
            std::to_string(ordinal) + ": " + cuda_error_text(err);
  } catch (...) {
    error.clear();  // out of memory for the message itself
  }
  return nullptr;
}

void managed_free(void* ptr) noexcept {
  if (ptr != nullptr) (void)cudaFree(ptr);
}

bool cuda_pointer(const void* ptr, int32_t& ordinal) noexcept {
  if (ptr == nullptr) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    return false;
  }
  ordinal = attributes.device;
  return true;
}

}  // namespace tessera::device

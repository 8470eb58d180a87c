// The host table of the emulation's tests (units_test.cpp,
// matmul_test.cpp): a rank on emulated CUDA device 0.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tessera/c/host.h"

namespace tessera::model {

// A host table that runs its rank on emulated CUDA device 0 at the given
// precision; its mem_alloc hands out (emulated) managed memory, and it
// keeps every line logged to it, debug included.
class CudaHost {
 public:
  explicit CudaHost(tessera_dtype precision = TESSERA_F32, bool tf32 = false)
      : precision_(precision), tf32_(tf32) {
    api_.struct_size = sizeof(api_);
    api_.abi_major = TESSERA_ABI_MAJOR;
    api_.abi_minor = TESSERA_ABI_MINOR;
    api_.ctx = this;
    api_.compute_device = [](void*, tessera_device* out) { *out = {TESSERA_DEVICE_CUDA, 0}; };
    api_.mem_alloc = [](void*, uint64_t bytes) -> void* {
      void* ptr = nullptr;
      if (cudaMallocManaged(&ptr, bytes) != cudaSuccess) return nullptr;
      std::memset(ptr, 0, bytes);
      return ptr;
    };
    api_.mem_free = [](void*, void* ptr, uint64_t) { (void)cudaFree(ptr); };
    api_.pointer_device = [](void*, const void* ptr, tessera_device* out) {
      cudaPointerAttributes a;
      (void)cudaPointerGetAttributes(&a, ptr);
      *out = a.type == cudaMemoryTypeUnregistered ? tessera_device{TESSERA_DEVICE_CPU, 0}
                                                  : tessera_device{TESSERA_DEVICE_CUDA, 0};
    };
    api_.compute_precision = [](void* ctx) { return static_cast<CudaHost*>(ctx)->precision_; };
    api_.compute_tf32 = [](void* ctx) { return static_cast<CudaHost*>(ctx)->tf32_ ? 1 : 0; };
    api_.log_level = [](void*) -> tessera_log_level { return TESSERA_LOG_DEBUG; };
    api_.log = [](void* ctx, tessera_log_level, int32_t, const char* message) {
      auto* self = static_cast<CudaHost*>(ctx);
      const std::lock_guard<std::mutex> lock(self->mutex_);
      self->lines_.emplace_back(message);
    };
  }
  CudaHost(const CudaHost&) = delete;
  CudaHost& operator=(const CudaHost&) = delete;
  [[nodiscard]] const tessera_host_api* api() const noexcept { return &api_; }
  // The lines logged so far.
  [[nodiscard]] std::vector<std::string> lines() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }

 private:
  tessera_host_api api_{};
  tessera_dtype precision_;
  bool tf32_;
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

// Runs `body` on a thread of its own, and so on a lane of its own (see
// plugins/models/common/cuda/device_support.hpp): a stream and handles of
// its own, and no cuBLASLt plans kept from the thread's earlier products,
// whose algorithms the heuristic would not be asked for again.
template <typename Body>
void on_a_fresh_lane(Body&& body) {
  std::thread thread(std::forward<Body>(body));
  thread.join();
}

}  // namespace tessera::model

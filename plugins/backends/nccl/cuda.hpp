// CUDA and NCCL calls the backend makes, their errors worded as Tessera
// errors, and Tessera's dtypes and reduce ops in NCCL's terms.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/c/common.h"

namespace tessera::nccl_backend {

// Throws Error(INTERNAL) "nccl: <call> failed (<where>): <CUDA's error>" unless
// `err` is cudaSuccess.
void cuda_check(cudaError_t err, const char* call, const std::string& where);

// "ncclInvalidUsage: invalid usage (<last error>)" for messages.
std::string nccl_error_text(ncclResult_t r, ncclComm_t comm);

// The number of CUDA devices. Throws Error(UNSUPPORTED) "nccl: no
// CUDA device (cudaGetDeviceCount: ...)" when there is none or the driver
// cannot be used.
int32_t require_cuda_devices();

ncclDataType_t nccl_dtype(tessera_dtype d) noexcept;
ncclRedOp_t nccl_op(tessera_reduce_op op) noexcept;
size_t dtype_bytes(tessera_dtype d) noexcept;

// A CUDA event recorded after an operation; owned by the work handle and
// the group's list of pending operations.
class Event {
 public:
  Event();  // throws Error(INTERNAL) when no event can be created
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();
  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }
  // Records the event on `stream` (after what is enqueued there).
  [[nodiscard]] cudaError_t record(cudaStream_t stream) noexcept {
    const cudaError_t err = cudaEventRecord(event_, stream);
    if (err == cudaSuccess) recorded_.store(true, std::memory_order_release);
    return err;
  }
  // False while the operation is still being enqueued (see Group::start).
  [[nodiscard]] bool recorded() const noexcept { return recorded_.load(std::memory_order_acquire); }

 private:
  cudaEvent_t event_ = nullptr;
  std::atomic<bool> recorded_{false};
};

// A device allocation grown on demand (staging, the barrier's scratch).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  // At least `bytes` bytes of device memory (contents not kept on growth).
  void* reserve(size_t bytes, const std::string& where);

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tessera::nccl_backend

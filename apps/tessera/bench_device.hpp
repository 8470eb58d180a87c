// Device memory for `bench collectives --device cuda`: the few CUDA runtime
// calls the benchmark needs, behind an interface that does not name CUDA.
// bench_device_cuda.cpp implements it when the CUDA Toolkit was found at
// build time (linked with the static CUDA runtime, so `tessera` starts on
// machines without a driver); bench_device_none.cpp otherwise, where every
// call that needs a device throws the "built without" UsageError.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::cli {

// True when this tessera was built with the CUDA Toolkit.
bool cuda_built() noexcept;

// The number of CUDA devices, at least 1. Throws UsageError "--device cuda:
// this tessera was built without the CUDA Toolkit" in a build without it,
// and Error(UNSUPPORTED) "--device cuda: no CUDA device (cudaGetDeviceCount:
// <CUDA's error>)" when the runtime finds none or cannot be used.
int32_t cuda_device_count();

// `bytes` of memory on CUDA device `ordinal` (cudaMalloc), copied to and
// from the host with blocking copies. Every call first makes `ordinal` the
// calling thread's device. Allocation failure throws Error(OUT_OF_MEMORY)
// naming the size and device; other CUDA failures Error(INTERNAL) naming the
// call. Zero bytes allocate nothing.
class CudaMemory {
 public:
  CudaMemory() = default;
  CudaMemory(int32_t ordinal, size_t bytes);
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  CudaMemory(CudaMemory&& other) noexcept;
  CudaMemory& operator=(CudaMemory&& other) noexcept;
  ~CudaMemory();

  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] size_t size() const noexcept { return size_; }

  // Copies size() bytes from `host` to the device; the copy is complete on
  // the device when this returns (so work on any stream sees it).
  void upload(const void* host);
  // Copies size() bytes from the device to `host`, after all work already
  // submitted to the device has finished.
  void download(void* host) const;

 private:
  void release() noexcept;
  void* data_ = nullptr;
  size_t size_ = 0;
  int32_t ordinal_ = 0;
};

}  // namespace tessera::cli

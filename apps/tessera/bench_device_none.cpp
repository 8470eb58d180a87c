// bench_device.hpp in a tessera built without the CUDA Toolkit: no device
// can be used, and saying so is a usage error.
#include <utility>

#include "bench_device.hpp"
#include "cli_error.hpp"

namespace tessera::cli {

namespace {

[[noreturn]] void throw_built_without() {
  throw UsageError("--device cuda: this tessera was built without the CUDA Toolkit");
}

}  // namespace

bool cuda_built() noexcept { return false; }

int32_t cuda_device_count() { throw_built_without(); }

CudaMemory::CudaMemory(int32_t /*ordinal*/, size_t /*bytes*/) { throw_built_without(); }

CudaMemory::CudaMemory(CudaMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      ordinal_(other.ordinal_) {}

CudaMemory& CudaMemory::operator=(CudaMemory&& other) noexcept {
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  ordinal_ = other.ordinal_;
  return *this;
}

CudaMemory::~CudaMemory() { release(); }

void CudaMemory::release() noexcept {}

void CudaMemory::upload(const void* /*host*/) { throw_built_without(); }

void CudaMemory::download(void* /*host*/) const { throw_built_without(); }

}  // namespace tessera::cli

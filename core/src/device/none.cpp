// tessera/core/device.hpp without the CUDA Toolkit: no device to use.
#include <string>

#include "tessera/core/device.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::device {

bool cuda_built() noexcept { return false; }

int32_t cuda_device_count() {
  throw Error(TESSERA_ERR_UNSUPPORTED, "this tessera was built without the CUDA Toolkit");
}

void* managed_alloc(int32_t /*ordinal*/, std::size_t /*bytes*/, std::string& error) noexcept {
  error = "this tessera was built without the CUDA Toolkit";
  return nullptr;
}

void managed_free(void* /*ptr*/) noexcept {}

bool cuda_pointer(const void* /*ptr*/, int32_t& /*ordinal*/) noexcept { return false; }

}  // namespace tessera::device

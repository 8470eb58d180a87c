// The host built without the CUDA Toolkit (core/src/device/none.cpp, linked
// here in place of the CUDA one wherever the toolkit was found): a CUDA run
// stops before it starts, saying so; nothing is ever a CUDA pointer.
#include <gtest/gtest.h>

#include <string>

#include "tessera/core/device.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

TEST(DeviceNone, ACudaRunIsRefusedNamingTheKey) {
  EXPECT_FALSE(device::cuda_built());
  try {
    const RunDeviceGuard guard(ComputeDevice::cuda);
    ADD_FAILURE() << "a CUDA run started in a build without the CUDA Toolkit";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_UNSUPPORTED);
    EXPECT_EQ(std::string(e.what()),
              "run.device = \"cuda\": this tessera was built without the CUDA Toolkit");
  }
  EXPECT_EQ(run_device(), ComputeDevice::cpu);
}

TEST(DeviceNone, NoMemoryAndNoCudaPointers) {
  std::string error;
  EXPECT_EQ(device::managed_alloc(0, 64, error), nullptr);
  EXPECT_EQ(error, "this tessera was built without the CUDA Toolkit");
  int value = 0;
  int32_t ordinal = -1;
  EXPECT_FALSE(device::cuda_pointer(&value, ordinal));
  device::managed_free(nullptr);
}

TEST(DeviceNone, ACpuRunNeedsNoDevice) {
  {
    const RunDeviceGuard guard(ComputeDevice::cpu);
    EXPECT_EQ(run_device(), ComputeDevice::cpu);
    EXPECT_EQ(rank_device_ordinal(), 0);
  }
  EXPECT_EQ(compute_device_name(ComputeDevice::cuda), "cuda");
  EXPECT_EQ(compute_device_name(ComputeDevice::cpu), "cpu");
}

}  // namespace
}  // namespace tessera

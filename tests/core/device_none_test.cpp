// The host built without the CUDA Toolkit (core/src/device/none.cpp and
// no_kernels.cpp, linked here in place of the CUDA ones wherever the toolkit
// was found): a CUDA run stops before it starts, saying so; nothing is ever
// a CUDA pointer, and every element-wise pass is left to the CPU.
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>

#include "tessera/core/device.hpp"
#include "tessera/core/optim/optimizer.hpp"
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

TEST(DeviceNone, EveryPassIsLeftToTheCpu) {
  float x[3] = {1.0F, 2.0F, 3.0F};
  double total = 0.0;
  EXPECT_FALSE(device::fill_on_cuda(x, 3, 0.0F));
  EXPECT_FALSE(device::scale_on_cuda(x, 3, 2.0F));
  EXPECT_FALSE(device::sum_squares_on_cuda(x, 3, total));
  float g[3] = {0.5F, 0.5F, 0.5F};
  const std::unique_ptr<Optimizer> sgd = make_optimizer("sgd", OptimizerParams{});
  EXPECT_FALSE(
      device::optimizer_step_on_cuda(sgd->elementwise_step(1, 0.1F), x, g, nullptr, nullptr, 3));
  EXPECT_EQ(x[0], 1.0F);  // untouched: the caller does the work
  OptimizerState state = sgd->make_state(3);
  sgd->step(std::span<float>(x), std::span<const float>(g), state, 1, 0.1F);  // on the CPU
  EXPECT_EQ(x[0], 1.0F - 0.1F * 0.5F);
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

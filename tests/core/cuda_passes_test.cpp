// On a GPU (label `gpu`): the host's element-wise passes and the optimizers'
// update on CUDA managed memory (tessera/core/device.hpp) run on the device
// and give what the CPU gives: the update bit for bit for every rule, fill
// and scale exactly, the sum of squares within rounding and the same on
// every call. Every test skips, saying why, where no CUDA device is found.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/device.hpp"
#include "tessera/core/optim/optimizer.hpp"
#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

class CudaPasses : public ::testing::Test {
 protected:
  void SetUp() override {
    try {
      (void)device::cuda_device_count();
    } catch (const Error& e) {
      GTEST_SKIP() << e.what() << ": the CUDA pass tests need a CUDA device";
    }
    guard_ = std::make_unique<RunDeviceGuard>(ComputeDevice::cuda);
  }
  std::unique_ptr<RunDeviceGuard> guard_;
};

// `n` floats of managed memory on device 0, holding `values` when given.
class Managed {
 public:
  explicit Managed(const std::vector<float>& values) : n_(values.size()) {
    std::string error;
    data_ = static_cast<float*>(device::managed_alloc(0, n_ * sizeof(float), error));
    if (data_ == nullptr) throw Error(TESSERA_ERR_OUT_OF_MEMORY, error);
    std::memcpy(data_, values.data(), n_ * sizeof(float));
  }
  Managed(const Managed&) = delete;
  Managed& operator=(const Managed&) = delete;
  ~Managed() { device::managed_free(data_); }
  [[nodiscard]] std::span<float> span() const { return {data_, n_}; }
  [[nodiscard]] std::vector<float> values() const { return {data_, data_ + n_}; }

 private:
  size_t n_;
  float* data_ = nullptr;
};

std::vector<float> wave(size_t n, float phase, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(phase + 0.37F * static_cast<float>(i));
  return v;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(CudaPasses, EveryOptimizerUpdatesOnTheDeviceAsOnTheCpuBitForBit) {
  constexpr size_t kN = 100003;  // not a multiple of any block size
  for (const std::string& name : optimizer_names()) {
    SCOPED_TRACE(name);
    OptimizerParams params;
    params.weight_decay = 0.01;
    params.nesterov = name == "momentum";
    const std::unique_ptr<Optimizer> opt = make_optimizer(name, params);
    std::vector<float> cpu_params = wave(kN, 0.1F, 1.0F);
    const Managed gpu_params(cpu_params);
    OptimizerState cpu_state = opt->make_state(kN);
    OptimizerState gpu_state = opt->make_state(kN, 0);
    EXPECT_EQ(gpu_state.on_cuda(), opt->slots() > 0);
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<float> grads = wave(kN, static_cast<float>(step), 0.01F);
      const Managed gpu_grads(grads);
      opt->step(cpu_params, grads, cpu_state, step, 0.05F);
      opt->step(gpu_params.span(), gpu_grads.span(), gpu_state, step, 0.05F);
    }
    EXPECT_TRUE(same_bits(cpu_params, gpu_params.values()));
    for (size_t k = 0; k < opt->slots(); ++k) {
      EXPECT_TRUE(same_bits(cpu_state.slot(k), gpu_state.slot(k))) << "slot " << k;
    }
  }
}

TEST_F(CudaPasses, TheUpdateOfASubRangeRunsOnTheDevice) {
  const std::unique_ptr<Optimizer> opt = make_optimizer("adamw", OptimizerParams{});
  OptimizerState state = opt->make_state(1000, 0);
  const Managed params(wave(300, 0.5F, 1.0F));
  const Managed grads(wave(300, 1.5F, 0.1F));
  const optim::ElementwiseStep s = opt->elementwise_step(1, 0.01F);
  EXPECT_TRUE(device::optimizer_step_on_cuda(s, params.span().data(), grads.span().data(),
                                             state.slot(0).data() + 700, state.slot(1).data() + 700,
                                             300));
  // Host memory is left to the CPU.
  std::vector<float> host_params(300, 1.0F);
  EXPECT_FALSE(device::optimizer_step_on_cuda(s, host_params.data(), grads.span().data(),
                                              state.slot(0).data(), state.slot(1).data(), 300));
}

TEST_F(CudaPasses, FillScaleAndSumOfSquaresRunOnTheDevice) {
  for (const size_t n : {size_t{1}, size_t{5}, size_t{4097}, size_t{3000017}}) {
    SCOPED_TRACE(n);
    const std::vector<float> values = wave(n, 0.3F, 2.0F);
    const Managed x(values);
    double total = 0.0;
    ASSERT_TRUE(device::sum_squares_on_cuda(x.span().data(), n, total));
    const double expected = sdk::sum_squares(values);
    EXPECT_NEAR(total, expected, 1e-12 * expected);
    double again = 0.0;
    ASSERT_TRUE(device::sum_squares_on_cuda(x.span().data(), n, again));
    EXPECT_EQ(std::memcmp(&total, &again, sizeof(double)), 0);

    ASSERT_TRUE(device::scale_on_cuda(x.span().data(), n, 0.75F));
    std::vector<float> scaled = values;
    sdk::scale_in_place(scaled, 0.75F);
    EXPECT_TRUE(same_bits(scaled, x.values()));

    ASSERT_TRUE(device::fill_on_cuda(x.span().data(), n, 0.0F));
    EXPECT_TRUE(same_bits(std::vector<float>(n, 0.0F), x.values()));
  }
  // Nothing to do, or host memory: left to the caller.
  double unused = 0.0;
  EXPECT_FALSE(device::sum_squares_on_cuda(nullptr, 0, unused));
  std::vector<float> host(4, 1.0F);
  EXPECT_FALSE(device::fill_on_cuda(host.data(), host.size(), 0.0F));
}

}  // namespace
}  // namespace tessera

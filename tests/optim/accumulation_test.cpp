// Micro-batch accumulation gives the gradient of the global mean loss.
#include <gtest/gtest.h>

#include <vector>

#include "tessera/core/optim/accumulation.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

// d/dw of the mean over examples of (w - x)^2 / 2 is mean(w - x).
TEST(Accumulation, UnevenMicroBatchesGiveTheGlobalMeanGradient) {
  const std::vector<float> x = {1.0F, 2.0F, 4.0F, 8.0F, 16.0F, 32.0F, 64.0F};
  const float w = 3.0F;
  double full = 0.0;
  for (const float xi : x) {
    full += (w - xi) / static_cast<double>(x.size());
  }
  // Micro-batches of 3, 2 and 2 examples (as a rank's slice split in 3).
  const std::vector<std::pair<size_t, size_t>> micro = {{0, 3}, {3, 2}, {5, 2}};
  std::vector<float> acc = {0.0F};
  for (const auto& [begin, count] : micro) {
    double mean = 0.0;  // the micro-batch's own mean-loss gradient
    for (size_t i = begin; i < begin + count; ++i) {
      mean += (w - x[i]) / static_cast<double>(count);
    }
    const float scale =
        micro_batch_loss_scale(static_cast<int64_t>(count), static_cast<int64_t>(x.size()));
    const std::vector<float> g = {static_cast<float>(mean) * scale};
    accumulate_gradients(acc, g);
  }
  EXPECT_NEAR(acc[0], full, 1e-5);
}

TEST(Accumulation, ScaleAndChecks) {
  EXPECT_FLOAT_EQ(micro_batch_loss_scale(8, 32), 0.25F);
  EXPECT_THROW((void)micro_batch_loss_scale(1, 0), Error);
  EXPECT_THROW((void)micro_batch_loss_scale(33, 32), Error);
  std::vector<float> acc(3, 0.0F);
  const std::vector<float> wrong(2, 1.0F);
  EXPECT_THROW(accumulate_gradients(acc, wrong), Error);
}

}  // namespace
}  // namespace tessera

// Global-norm clipping from per-shard partial sums.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tessera/core/optim/clip.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

TEST(Clip, NormOfKnownVector) {
  const std::vector<float> g = {3.0F, 4.0F};
  EXPECT_DOUBLE_EQ(sum_squares(g), 25.0);
  EXPECT_DOUBLE_EQ(global_grad_norm(sum_squares(g)), 5.0);
}

TEST(Clip, OneShardAndManyShardsAgree) {
  std::mt19937 gen(7);
  std::normal_distribution<float> dist(0.0F, 1.0F);
  std::vector<float> g(10007);
  for (float& x : g) {
    x = dist(gen);
  }
  const double whole = sum_squares(g);
  for (size_t shards = 2; shards <= 5; ++shards) {
    double total = 0.0;
    size_t begin = 0;
    for (size_t k = 0; k < shards; ++k) {
      // Uneven shards: the first ones get one element more.
      const size_t len = g.size() / shards + (k < g.size() % shards ? 1 : 0);
      total += sum_squares(std::span<const float>(g).subspan(begin, len));
      begin += len;
    }
    ASSERT_EQ(begin, g.size());
    EXPECT_NEAR(global_grad_norm(total), global_grad_norm(whole), 1e-12 * std::sqrt(whole))
        << shards << " shards";
    EXPECT_EQ(clip_coefficient(total, 1.0), clip_coefficient(whole, 1.0)) << shards << " shards";
  }
}

TEST(Clip, CoefficientClipsToMaxNorm) {
  std::vector<float> g = {3.0F, 4.0F};  // norm 5
  const float c = clip_coefficient(sum_squares(g), 1.0);
  EXPECT_NEAR(c, 1.0 / (5.0 + 1e-6), 1e-7);
  scale_in_place(g, c);
  EXPECT_NEAR(global_grad_norm(sum_squares(g)), 1.0, 1e-6);
}

TEST(Clip, SmallNormAndDisabledLeaveGradients) {
  EXPECT_EQ(clip_coefficient(0.25, 1.0), 1.0F);   // norm 0.5 < 1
  EXPECT_EQ(clip_coefficient(100.0, 0.0), 1.0F);  // clipping off
  EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0F);    // zero gradients
}

TEST(Clip, NonFiniteNormIsAnError) {
  const std::vector<float> g = {1.0F, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_THROW((void)clip_coefficient(sum_squares(g), 1.0), Error);
  EXPECT_THROW((void)clip_coefficient(std::numeric_limits<double>::infinity(), 1.0), Error);
  EXPECT_THROW((void)clip_coefficient(-1.0, 1.0), Error);
}

}  // namespace
}  // namespace tessera

// The topk compressor: k pairs of the largest magnitudes, ties to the lower
// index, error feedback's conservation and ratio 1's exact sum. Values are
// multiples of 1/16 with few bits, so every f32 sum here is exact and the
// checks compare bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "compress_harness.hpp"

namespace tessera::test {
namespace {

// Multiples of 1/16 in [-8, 8].
std::vector<float> dyadic(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-128, 128);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(gen)) / 16.0F;
  return v;
}

std::vector<uint32_t> indices_of(const std::vector<unsigned char>& enc, uint64_t k) {
  std::vector<uint32_t> idx(k);
  std::memcpy(idx.data(), enc.data(), 4 * k);
  return idx;
}

// k = max(1, ceil(ratio * elements)); the encoding is k ascending distinct
// indices and their k values, and they are the k largest magnitudes.
TEST(TopkCompressor, SendsExactlyKPairsOfTheLargest) {
  const Compressors c("topk", "ratio = 0.05\nerror_feedback = false");
  EXPECT_EQ(c.kind(), TESSERA_COMPRESS_GATHER);
  EXPECT_EQ(State(c, 0, make_bucket(1000, 1, 0)).encoded_bytes(), 8U * 50);
  EXPECT_EQ(State(c, 0, make_bucket(1001, 1, 0)).encoded_bytes(), 8U * 51);
  EXPECT_EQ(State(c, 0, make_bucket(3, 1, 0)).encoded_bytes(), 8U);  // at least one
  const Compressors seven("topk", "ratio = 0.07");  // 0.07 * 100 is 7.000000000000001 in double
  EXPECT_EQ(State(seven, 0, make_bucket(100, 1, 0)).encoded_bytes(), 8U * 7);
  constexpr size_t kN = 1000;
  std::vector<float> x(kN);
  for (size_t i = 0; i < kN; ++i)
    x[i] = static_cast<float>((i * 37) % kN) * (i % 2 == 1 ? -1.0F : 1.0F);
  std::vector<State> states = make_states(c, kN);
  std::vector<unsigned char> enc;
  const std::vector<float> decoded = gather_round(states, {x}, &enc);
  ASSERT_EQ(enc.size(), 8U * 50);
  const std::vector<uint32_t> idx = indices_of(enc, 50);
  EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
  EXPECT_EQ(std::adjacent_find(idx.begin(), idx.end()), idx.end());
  // |x| is a permutation of 0..999: the 50 largest are 950..999.
  for (const uint32_t i : idx) EXPECT_GE(std::fabs(x[i]), 950.0F) << "index " << i;
  size_t nonzero = 0;
  for (size_t i = 0; i < kN; ++i) {
    if (decoded[i] != 0.0F) {
      ++nonzero;
      EXPECT_EQ(decoded[i], x[i]);
    }
  }
  EXPECT_EQ(nonzero, 50U);
}

// Equal magnitudes: the lower indices win, whatever the signs.
TEST(TopkCompressor, TiesGoToTheLowerIndex) {
  const Compressors c("topk", "ratio = 0.3\nerror_feedback = false");
  std::vector<State> states = make_states(c, 10);
  const std::vector<float> x{1.0F, -2.0F, 2.0F, -1.0F, -2.0F, 2.0F, 0.5F, -2.0F, 1.0F, 2.0F};
  std::vector<unsigned char> enc;
  (void)gather_round(states, {x}, &enc);
  EXPECT_EQ(indices_of(enc, 3), (std::vector<uint32_t>{1, 2, 4}));
}

// Ratio 1 sends everything: the decoded sum over 3 ranks is the f32 sum.
TEST(TopkCompressor, RatioOneIsTheExactSum) {
  constexpr int kRanks = 3;
  constexpr size_t kN = 257;
  const Compressors c("topk", "ratio = 1.0", kRanks);
  std::vector<State> states = make_states(c, kN);
  std::vector<std::vector<float>> grads;
  grads.reserve(kRanks);
  for (int r = 0; r < kRanks; ++r) grads.push_back(dyadic(kN, 20U + static_cast<uint32_t>(r)));
  const std::vector<float> decoded = gather_round(states, grads);
  for (size_t i = 0; i < kN; ++i) {
    ASSERT_EQ(decoded[i], grads[0][i] + grads[1][i] + grads[2][i]) << "element " << i;
  }
}

// Error feedback conserves: over 6 steps of new gradients on 2 ranks and
// then steps of zeros until every residual is sent (k = 10 of 100 per
// step), what was sent adds up to what came in, bit for bit; the first
// step's decode is the k largest of each rank.
TEST(TopkCompressor, ErrorFeedbackSendsEverythingEventually) {
  constexpr int kRanks = 2;
  constexpr size_t kN = 100;
  const Compressors c("topk", "ratio = 0.1", kRanks);
  std::vector<State> states = make_states(c, kN);
  std::vector<float> in_total(kN, 0.0F);
  std::vector<float> sent_total(kN, 0.0F);
  for (int step = 0; step < 6 + 10 * kRanks; ++step) {
    std::vector<std::vector<float>> grads(kRanks, std::vector<float>(kN, 0.0F));
    if (step < 6) {
      for (int r = 0; r < kRanks; ++r) grads[static_cast<size_t>(r)] = dyadic(kN, 100 * step + r);
    }
    for (const auto& g : grads) {
      for (size_t i = 0; i < kN; ++i) in_total[i] += g[i];
    }
    const std::vector<float> decoded = gather_round(states, grads);
    size_t nonzero = 0;
    for (size_t i = 0; i < kN; ++i) {
      sent_total[i] += decoded[i];
      nonzero += decoded[i] != 0.0F ? 1 : 0;
    }
    EXPECT_LE(nonzero, 10U * kRanks);
  }
  EXPECT_EQ(sent_total, in_total);
}

// Without error feedback what is not sent is dropped.
TEST(TopkCompressor, WithoutErrorFeedbackTheRestIsDropped) {
  const Compressors c("topk", "ratio = 0.5\nerror_feedback = false");
  std::vector<State> states = make_states(c, 4);
  const std::vector<float> x{4.0F, 1.0F, -3.0F, 2.0F};
  EXPECT_EQ(gather_round(states, {x}), (std::vector<float>{4.0F, 0.0F, -3.0F, 0.0F}));
  EXPECT_EQ(gather_round(states, {std::vector<float>(4, 0.0F)}), std::vector<float>(4, 0.0F));
}

TEST(TopkCompressor, BucketStateMemoryIsReported) {
  const int64_t before = comm_bytes_tracked();
  {
    const Compressors c("topk", "");
    const State s(c, 0, make_bucket(1000, 1, 0));
    // residual (f32) and the ranking scratch (u32): 8 bytes per element
    EXPECT_EQ(comm_bytes_tracked() - before, 8000);
  }
  EXPECT_EQ(comm_bytes_tracked(), before);
}

}  // namespace
}  // namespace tessera::test

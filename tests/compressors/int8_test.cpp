// The int8 compressor: the per-chunk quantisation error, the encoded size,
// the sum over ranks, stochastic rounding (unbiased, reproducible) and error
// feedback.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "compress_harness.hpp"

namespace tessera::test {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float range) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-range, range);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

float scale_of(const std::vector<unsigned char>& enc, size_t chunk) {
  float s = 0.0F;
  std::memcpy(&s, enc.data() + 4 * chunk, sizeof s);
  return s;
}

TEST(Int8Compressor, EncodedBytesAreElementsPlusAScalePerChunk) {
  const Compressors c("int8", "");
  EXPECT_EQ(c.kind(), TESSERA_COMPRESS_GATHER);
  EXPECT_EQ(c.wire_dtype(), TESSERA_U8);
  EXPECT_EQ(State(c, 0, make_bucket(1000, 1, 0)).encoded_bytes(), 1000U + 4 * 4);  // ceil(1000/256)
  EXPECT_EQ(State(c, 0, make_bucket(256, 1, 0)).encoded_bytes(), 256U + 4);
  EXPECT_EQ(State(c, 0, make_bucket(1, 1, 0)).encoded_bytes(), 1U + 4);
  const Compressors one("int8", "chunk = 1");
  EXPECT_EQ(State(one, 0, make_bucket(10, 1, 0)).encoded_bytes(), 50U);
  const Compressors big("int8", "chunk = 100000");
  EXPECT_EQ(State(big, 0, make_bucket(1000, 1, 0)).encoded_bytes(), 1004U);
}

// Round to nearest: every element within half its chunk's scale (max|x| /
// 127) of the input; a chunk of zeros has scale 0 and decodes to zeros; the
// last chunk is partial (1000 = 3 * 300 + 100).
TEST(Int8Compressor, RoundTripErrorIsAtMostHalfAScale) {
  constexpr size_t kN = 1000;
  constexpr size_t kChunk = 300;
  const Compressors c("int8", "chunk = 300");
  std::vector<State> states = make_states(c, kN);
  std::vector<float> x = random_values(kN, 3, 5.0F);
  std::fill(x.begin() + 300, x.begin() + 600, 0.0F);
  x[950] = -40.0F;  // the last chunk's largest magnitude
  std::vector<unsigned char> enc;
  const std::vector<float> decoded = gather_round(states, {x}, &enc);
  ASSERT_EQ(enc.size(), kN + 16);
  for (size_t chunk = 0; chunk < 4; ++chunk) {
    const size_t begin = chunk * kChunk;
    const size_t end = std::min(kN, begin + kChunk);
    float amax = 0.0F;
    for (size_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = scale_of(enc, chunk);
    EXPECT_EQ(scale, amax / 127.0F) << "chunk " << chunk;
    for (size_t i = begin; i < end; ++i) {
      ASSERT_LE(std::fabs(decoded[i] - x[i]), scale * 0.5F * (1.0F + 1e-5F))
          << "element " << i << " of chunk " << chunk;
    }
  }
  EXPECT_EQ(scale_of(enc, 1), 0.0F);
  for (size_t i = 300; i < 600; ++i) ASSERT_EQ(decoded[i], 0.0F);
  EXPECT_FLOAT_EQ(decoded[950], -40.0F);  // the largest value is exact (+-127)
}

// Three ranks: the decoded sum is the sum of each rank's dequantised values
// (rank order), within the sum of the half-scales of the true sum; a decode
// of a sub-range gives the same values.
TEST(Int8Compressor, GatherSumsTheRanksDequantisedValues) {
  constexpr int kRanks = 3;
  constexpr size_t kN = 700;
  const Compressors c("int8", "chunk = 64", kRanks);
  std::vector<State> states = make_states(c, kN);
  std::vector<std::vector<float>> grads;
  grads.reserve(kRanks);
  for (int r = 0; r < kRanks; ++r)
    grads.push_back(
        random_values(kN, 10U + static_cast<uint32_t>(r), 1.0F + static_cast<float>(r)));
  std::vector<unsigned char> all;
  const std::vector<float> decoded = gather_round(states, grads, &all);
  const uint64_t bytes = states[0].encoded_bytes();
  for (size_t i = 0; i < kN; ++i) {
    double sum = 0.0;
    double bound = 0.0;
    for (size_t r = 0; r < kRanks; ++r) {
      sum += grads[r][i];
      float s = 0.0F;
      std::memcpy(&s, all.data() + r * bytes + 4 * (i / 64), sizeof s);
      bound += 0.5 * s * (1.0 + 1e-5);
    }
    ASSERT_LE(std::fabs(decoded[i] - sum), bound + 1e-6) << "element " << i;
  }
  const std::vector<float> part = states[1].decode(all, kRanks, 100, 250);
  EXPECT_EQ(part, std::vector<float>(decoded.begin() + 100, decoded.begin() + 350));
}

// Stochastic rounding: values 0.25, -3.3 and 10.6 (scale 1 from the 127 in
// their chunk) average to themselves over 4000 steps (standard error below
// 0.008; the bound is 0.05), where rounding to nearest is off by 0.25, 0.3
// and 0.4 every step. Two compressors with the same seed encode the same
// bytes; another seed does not.
TEST(Int8Compressor, StochasticRoundingIsUnbiasedAndReproducible) {
  const std::vector<float> x{127.0F, 0.25F, -3.3F, 10.6F};
  constexpr int kSteps = 4000;
  const Compressors a("int8", "stochastic = true\nseed = 5");
  const Compressors b("int8", "stochastic = true\nseed = 5");
  const Compressors other("int8", "stochastic = true\nseed = 6");
  const Compressors nearest("int8", "");
  std::vector<State> sa = make_states(a, x.size());
  std::vector<State> sb = make_states(b, x.size());
  std::vector<State> so = make_states(other, x.size());
  std::vector<State> sn = make_states(nearest, x.size());
  std::vector<double> mean(x.size(), 0.0);
  int differs = 0;
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<unsigned char> ea = sa[0].encode(x);
    ASSERT_EQ(ea, sb[0].encode(x)) << "step " << step;
    differs += ea != so[0].encode(x) ? 1 : 0;
    const std::vector<float> d = sa[0].decode(ea, 1, 0, x.size());
    for (size_t i = 0; i < x.size(); ++i) mean[i] += d[i] / kSteps;
  }
  EXPECT_GT(differs, kSteps / 2);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(mean[i], x[i], 0.05) << "element " << i;
  const std::vector<float> d = sn[0].decode(sn[0].encode(x), 1, 0, x.size());
  EXPECT_EQ(d, (std::vector<float>{127.0F, 0.0F, -3.0F, 11.0F}));
}

// Error feedback: a constant input sent for 50 steps adds up to 50 times
// itself within one rounding (the residual carries what each step lost);
// without it the loss of every step adds up.
TEST(Int8Compressor, ErrorFeedbackCarriesTheRoundingLoss) {
  const std::vector<float> x{127.0F, 0.25F, -3.3F, 10.6F};
  constexpr int kSteps = 50;
  const Compressors fb("int8", "error_feedback = true");
  const Compressors plain("int8", "");
  std::vector<State> sf = make_states(fb, x.size());
  std::vector<State> sp = make_states(plain, x.size());
  std::vector<double> sent_fb(x.size(), 0.0);
  std::vector<double> sent_plain(x.size(), 0.0);
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<float> f = gather_round(sf, {x});
    const std::vector<float> p = gather_round(sp, {x});
    for (size_t i = 0; i < x.size(); ++i) {
      sent_fb[i] += f[i];
      sent_plain[i] += p[i];
    }
  }
  for (size_t i = 1; i < x.size(); ++i) {
    EXPECT_LE(std::fabs(sent_fb[i] - kSteps * x[i]), 0.5 + 1e-3) << "element " << i;
    EXPECT_GE(std::fabs(sent_plain[i] - kSteps * x[i]), 0.25 * kSteps - 1e-3) << "element " << i;
  }
}

// Error feedback keeps a residual and the input plus residual (f32 each);
// without it a state holds nothing per element.
TEST(Int8Compressor, BucketStateMemoryIsReported) {
  const int64_t before = comm_bytes_tracked();
  {
    const Compressors fb("int8", "error_feedback = true");
    const State s(fb, 0, make_bucket(1000, 1, 0));
    EXPECT_EQ(comm_bytes_tracked() - before, 8000);
    const Compressors plain("int8", "");
    const State p(plain, 0, make_bucket(1000, 1, 0));
    EXPECT_EQ(comm_bytes_tracked() - before, 8000);
  }
  EXPECT_EQ(comm_bytes_tracked(), before);
}

}  // namespace
}  // namespace tessera::test

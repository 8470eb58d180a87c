// The fp16 and bf16 compressors: a SUMMABLE round over 4 ranks against the
// f32 sum, f16's overflow guard, and their options.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "compress_harness.hpp"
#include "tessera/sdk/cast_compressor.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

std::vector<std::vector<float>> cast_grads(int ranks, size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.0F, 2.0F);
  std::vector<std::vector<float>> g(static_cast<size_t>(ranks), std::vector<float>(n));
  for (auto& rank : g) {
    for (float& v : rank) v = dist(gen);
  }
  return g;
}

// Each rank's value is rounded to the wire dtype once (relative error at
// most u = 2^-(mantissa bits + 1)), the f32 sum of the rounded values once
// more: |decoded - sum| <= u * (sum_i |x_i| + |sum|) + f32 slack. The
// scale (1 / 4 here) is a power of two and changes no rounding.
void expect_cast_sum(const char* name, tessera_dtype wire, double unit_roundoff) {
  constexpr int kRanks = 4;
  constexpr size_t kN = 1000;
  const Compressors c(name, "", kRanks);
  ASSERT_EQ(c.kind(), TESSERA_COMPRESS_SUMMABLE);
  ASSERT_EQ(c.wire_dtype(), wire);
  std::vector<State> states = make_states(c, kN);
  EXPECT_EQ(states[0].encoded_bytes(), kN * 2);
  const auto grads = cast_grads(kRanks, kN, 7);
  const std::vector<float> decoded = summable_round(states, grads, wire);
  ASSERT_EQ(decoded.size(), kN);
  double worst = 0.0;
  for (size_t i = 0; i < kN; ++i) {
    double sum = 0.0;
    double abs_sum = 0.0;
    for (int r = 0; r < kRanks; ++r) {
      sum += grads[static_cast<size_t>(r)][i];
      abs_sum += std::fabs(grads[static_cast<size_t>(r)][i]);
    }
    const double bound = unit_roundoff * (abs_sum + std::fabs(sum)) + 1e-6 * abs_sum;
    ASSERT_LE(std::fabs(decoded[i] - sum), bound) << name << " element " << i;
    worst = std::max(worst, std::fabs(decoded[i] - sum));
  }
  EXPECT_GT(worst, 0.0) << name << " is not lossy on random data: is the cast done?";
}

TEST(CastCompressor, Fp16SumWithinHalfRounding) {
  expect_cast_sum("fp16", TESSERA_F16, std::ldexp(1.0, -11));
}

TEST(CastCompressor, Bf16SumWithinBfloat16Rounding) {
  expect_cast_sum("bf16", TESSERA_BF16, std::ldexp(1.0, -8));
}

// 4 ranks of 0.9 * 65504 each sum to ~235800, beyond f16: divided by the
// world first (the default) the sum is ~58950 on the wire and decodes to
// the true sum; without, the wire sum overflows to inf.
TEST(CastCompressor, Fp16DivideByWorldKeepsTheSumFinite) {
  constexpr int kRanks = 4;
  constexpr size_t kN = 8;
  const float big = 65504.0F * 0.9F;
  const std::vector<std::vector<float>> grads(kRanks, std::vector<float>(kN, big));
  {
    const Compressors c("fp16", "divide_by_world = true", kRanks);
    std::vector<State> states = make_states(c, kN);
    for (const float v : summable_round(states, grads, TESSERA_F16)) {
      ASSERT_TRUE(std::isfinite(v));
      EXPECT_NEAR(v, 4.0 * big, 4.0 * big * std::ldexp(1.0, -10));
    }
  }
  {
    const Compressors c("fp16", "", kRanks);  // divide_by_world defaults to false
    std::vector<State> states = make_states(c, kN);
    for (const float v : summable_round(states, grads, TESSERA_F16)) {
      EXPECT_EQ(v, std::numeric_limits<float>::infinity());
    }
  }
}

// A sum past the 16-bit range from finite gradients is an overflow a
// watched bucket reports (the plugins watch theirs and warn of it, naming
// the scale); non-finite gradients of the rank's own, or a sum in range,
// are not; an unwatched bucket (a strategy's reduce_dtype) looks for none.
TEST(CastCompressor, AnOverflowedSumIsReportedApartFromNonFiniteGradients) {
  sdk::CastBucket bucket(TESSERA_F16, 3, 1e6F);
  bucket.watch_overflow();
  std::vector<uint16_t> wire(3);
  std::vector<float> out(3);
  const std::vector<float> finite{1.0F, -2.0F, 0.0F};
  bucket.encode(finite, wire.data());
  bucket.decode(wire.data(), 1, 0, out);
  EXPECT_TRUE(bucket.overflowed());
  EXPECT_FALSE(std::isfinite(out[0]));
  const std::vector<float> nan{std::nanf(""), 0.0F, 0.0F};
  bucket.encode(nan, wire.data());
  bucket.decode(wire.data(), 1, 0, out);
  EXPECT_FALSE(bucket.overflowed()) << "the rank's own gradient was not finite";
  sdk::CastBucket in_range(TESSERA_F16, 3, 1.0F);
  in_range.watch_overflow();
  in_range.encode(finite, wire.data());
  in_range.decode(wire.data(), 1, 0, out);
  EXPECT_FALSE(in_range.overflowed());
  EXPECT_EQ(out, finite);
  sdk::CastBucket unwatched(TESSERA_F16, 3, 1e6F);
  unwatched.encode(finite, wire.data());
  unwatched.decode(wire.data(), 1, 0, out);
  EXPECT_FALSE(unwatched.overflowed());
  EXPECT_FALSE(std::isfinite(out[0]));
}

// A scale is applied before the cast and undone after it: 2^-10 keeps
// 2^22 per rank (beyond f16) on the wire as 4096 and their sum as 8192.
TEST(CastCompressor, Fp16ScaleIsUndoneByDecode) {
  const Compressors c("fp16", "scale = 0.0009765625\ndivide_by_world = false", 2);
  std::vector<State> states = make_states(c, 3);
  const std::vector<std::vector<float>> grads{{4194304.0F, -1.0F, 0.5F}, {4194304.0F, 3.0F, 0.25F}};
  const std::vector<float> decoded = summable_round(states, grads, TESSERA_F16);
  EXPECT_EQ(decoded, (std::vector<float>{8388608.0F, 2.0F, 0.75F}));
}

// Zero and negative scales are the plugin's refusal (naming the plugin);
// inf and nan already the host's (options of type float are finite).
TEST(CastCompressor, BadScaleIsRefusedNamingTheOption) {
  for (const char* bad : {"scale = inf", "scale = nan"}) {
    try {
      const Compressors c("fp16", bad);
      ADD_FAILURE() << "fp16 accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("option 'scale'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("finite"), std::string::npos) << e.what();
    }
  }
  for (const char* bad : {"scale = -1.0", "scale = 0.0", "scale = 1e-300"}) {
    for (const char* name : {"fp16", "bf16"}) {
      try {
        const Compressors c(name, bad);
        ADD_FAILURE() << name << " accepted " << bad;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("option 'scale'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("positive finite"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace tessera::test

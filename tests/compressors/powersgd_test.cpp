// The powersgd compressor over ranks as threads: a low-rank sum recovered,
// vectors and small matrices exact, error feedback's conservation, the same
// bits on every rank, what the communicator carries.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "compress_harness.hpp"

namespace tessera::test {
namespace {

using Grads = std::vector<std::vector<float>>;

std::vector<double> normals(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

// Every rank's share M_i = U_i V^T (n x m) with sum_i U_i = U: each has rank
// <= r and so has their sum U V^T.
Grads low_rank_shares(int ranks, size_t n, size_t m, size_t r, uint32_t seed,
                      std::vector<double>* total) {
  const std::vector<double> u = normals(n * r, seed);
  const std::vector<double> v = normals(m * r, seed + 1);
  Grads shares(static_cast<size_t>(ranks), std::vector<float>(n * m));
  total->assign(n * m, 0.0);
  std::vector<double> rest = u;
  for (int s = 0; s < ranks; ++s) {
    std::vector<double> ui =
        s + 1 < ranks ? normals(n * r, seed + 10 + static_cast<uint32_t>(s)) : rest;
    for (size_t i = 0; i < n * r; ++i) rest[i] -= s + 1 < ranks ? ui[i] : 0.0;
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < m; ++j) {
        double x = 0.0;
        for (size_t k = 0; k < r; ++k) x += ui[i * r + k] * v[j * r + k];
        shares[static_cast<size_t>(s)][i * m + j] = static_cast<float>(x);
      }
    }
  }
  for (const auto& share : shares) {
    for (size_t i = 0; i < n * m; ++i) (*total)[i] += share[i];
  }
  return shares;
}

// Gram-Schmidt on the 2 columns of a rows x 2 row-major matrix.
void orthonormal_columns(std::vector<double>& x, size_t rows) {
  for (size_t c = 0; c < 2; ++c) {
    if (c == 1) {
      double dot = 0.0;
      for (size_t i = 0; i < rows; ++i) dot += x[i * 2] * x[i * 2 + 1];
      for (size_t i = 0; i < rows; ++i) x[i * 2 + 1] -= dot * x[i * 2];
    }
    double norm = 0.0;
    for (size_t i = 0; i < rows; ++i) norm += x[i * 2 + c] * x[i * 2 + c];
    for (size_t i = 0; i < rows; ++i) x[i * 2 + c] /= std::sqrt(norm);
  }
}

double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

// The sum of 3 ranks' rank-2 shares of a 32 x 24 matrix is recovered by a
// rank-2 PowerSGD step (to f32 precision) and stays so over warm-started
// steps (or from a new random Q each step); every rank gets the same bits; one allreduce of P (32 x
// 2) and one of Q (24 x 2) per step.
TEST(PowerSgdCompressor, RecoversALowRankSum) {
  constexpr int kRanks = 3;
  constexpr size_t kN = 32;
  constexpr size_t kM = 24;
  for (const char* options : {"rank = 2\nerror_feedback = false",
                              "rank = 2\nerror_feedback = false\nwarm_start = false"}) {
    const Compressors c("powersgd", options, kRanks);
    EXPECT_EQ(c.kind(), TESSERA_COMPRESS_COLLECTIVE);
    EXPECT_EQ(c.wire_dtype(), TESSERA_U8);
    std::vector<State> states = make_states(c, kN * kM, 0, {{0, kN, kM}});
    EXPECT_EQ(states[0].encoded_bytes(), 0U);
    for (int step = 0; step < 3; ++step) {
      std::vector<double> total;
      Grads grads = low_rank_shares(kRanks, kN, kM, 2, 40 + static_cast<uint32_t>(step), &total);
      const CommLog log = collective_round(states, grads);
      EXPECT_EQ(log.allreduce_counts, (std::vector<uint64_t>{kN * 2, kM * 2})) << "step " << step;
      EXPECT_LT(relative_error(grads[0], total), 1e-5) << "step " << step;
      for (int r = 1; r < kRanks; ++r) ASSERT_EQ(grads[static_cast<size_t>(r)], grads[0]);
    }
  }
}

// A matrix of full rank: warm-started power iteration on the same gradient
// converges to its best rank-2 approximation. The matrix is 10 a1 b1^T +
// 5 a2 b2^T (orthonormal a's and b's) plus a tail orthogonal to both sides
// of spectral norm about 2, so the best rank-2 approximation is the
// dominant part. One step from a random Q leaves part of the tail in the
// result (37% off here); each warm-started step shrinks the error about
// tenfold (0.37, 0.024, 0.0019, 0.00017 when written).
TEST(PowerSgdCompressor, WarmStartConvergesOnARepeatedGradient) {
  constexpr size_t kN = 40;
  constexpr size_t kM = 30;
  const Compressors c("powersgd", "rank = 2\nerror_feedback = false\nseed = 3", 2);
  std::vector<State> states = make_states(c, kN * kM, 1, {{0, kN, kM}});
  std::vector<double> a = normals(kN * 2, 1);
  std::vector<double> b = normals(kM * 2, 2);
  orthonormal_columns(a, kN);
  orthonormal_columns(b, kM);
  // tail = 0.15 (I - A A^T) G (I - B B^T), G standard normal
  std::vector<double> tail = normals(kN * kM, 9);
  for (size_t c2 = 0; c2 < 2; ++c2) {
    for (size_t j = 0; j < kM; ++j) {  // (I - a a^T) on the left
      double dot = 0.0;
      for (size_t i = 0; i < kN; ++i) dot += a[i * 2 + c2] * tail[i * kM + j];
      for (size_t i = 0; i < kN; ++i) tail[i * kM + j] -= dot * a[i * 2 + c2];
    }
    for (size_t i = 0; i < kN; ++i) {  // (I - b b^T) on the right
      double dot = 0.0;
      for (size_t j = 0; j < kM; ++j) dot += b[j * 2 + c2] * tail[i * kM + j];
      for (size_t j = 0; j < kM; ++j) tail[i * kM + j] -= dot * b[j * 2 + c2];
    }
  }
  std::vector<double> dominant(kN * kM);
  std::vector<float> half(kN * kM);  // each of the two ranks' share
  for (size_t i = 0; i < kN; ++i) {
    for (size_t j = 0; j < kM; ++j) {
      dominant[i * kM + j] = 10.0 * a[i * 2] * b[j * 2] + 5.0 * a[i * 2 + 1] * b[j * 2 + 1];
      half[i * kM + j] = static_cast<float>(0.5 * (dominant[i * kM + j] + 0.15 * tail[i * kM + j]));
    }
  }
  std::vector<double> errors;
  for (int step = 0; step < 4; ++step) {
    Grads grads{half, half};
    collective_round(states, grads);
    errors.push_back(relative_error(grads[0], dominant));
  }
  EXPECT_GT(errors[0], 0.1);
  EXPECT_LT(errors[3], 0.005);
  for (size_t s = 1; s < errors.size(); ++s) EXPECT_LT(errors[s], errors[s - 1]) << "step " << s;
}

// Vectors, a scalar, a 3 x 3 matrix (rank 4 would not compress it: (3 + 3)
// * 3 >= 9) and a gap between tensors go in one allreduce, exact; the 8 x 6
// matrix is compressed (P 8 x 2, Q 6 x 2).
TEST(PowerSgdCompressor, VectorsAndSmallMatricesAreExact) {
  constexpr int kRanks = 2;
  // [0,10) vector, [10,58) 8x6 matrix, [58,59) scalar, [59,64) gap,
  // [64,73) 3x3 matrix, [73,80) the bucket's tail
  const std::vector<sdk::CompressTensor> tensors{{0, 1, 10}, {10, 8, 6}, {58, 1, 1}, {64, 3, 3}};
  const Compressors c("powersgd", "rank = 2", kRanks);
  const Compressors c4("powersgd", "rank = 4", kRanks);
  for (const Compressors* comp : {&c, &c4}) {
    std::vector<State> states = make_states(*comp, 80, 0, tensors);
    Grads grads{std::vector<float>(80), std::vector<float>(80)};
    for (size_t i = 0; i < 80; ++i) {
      grads[0][i] = static_cast<float>(i) * 0.5F;
      grads[1][i] = 1.0F - static_cast<float>(i % 7);
    }
    const Grads input = grads;
    const CommLog log = collective_round(states, grads);
    const bool rank4 = comp == &c4;
    // rank 4: (8 + 6) * 4 = 56 >= 48, the 8 x 6 matrix is not compressed
    // either and one allreduce carries the whole bucket
    if (rank4) {
      EXPECT_EQ(log.allreduce_counts, (std::vector<uint64_t>{80}));
    } else {
      // the 32 uncompressed entries, then P (8 x 2) and Q (6 x 2)
      EXPECT_EQ(log.allreduce_counts, (std::vector<uint64_t>{32, 16, 12}));
    }
    for (size_t i = 0; i < 80; ++i) {
      if (!rank4 && i >= 10 && i < 58) continue;
      ASSERT_EQ(grads[0][i], input[0][i] + input[1][i]) << "element " << i;
      ASSERT_EQ(grads[1][i], grads[0][i]);
    }
  }
}

// Error feedback conserves: 4 steps of full-rank gradients on 3 ranks, then
// zero steps: each step sends the projection of the residuals' sum on r
// directions of its column space, so with 6 columns and r = 2 three zero
// steps flush it. What was sent adds up to what came in (to f32 rounding),
// and without error feedback it does not.
TEST(PowerSgdCompressor, ErrorFeedbackConservesTheGradient) {
  constexpr int kRanks = 3;
  constexpr size_t kN = 8;
  constexpr size_t kM = 6;
  for (const bool feedback : {true, false}) {
    const Compressors c("powersgd", feedback ? "rank = 2" : "rank = 2\nerror_feedback = false",
                        kRanks);
    std::vector<State> states = make_states(c, kN * kM, 2, {{0, kN, kM}});
    std::vector<double> in_total(kN * kM, 0.0);
    std::vector<float> sent_total(kN * kM, 0.0F);
    for (int step = 0; step < 4 + 4; ++step) {
      Grads grads(kRanks, std::vector<float>(kN * kM, 0.0F));
      if (step < 4) {
        for (int r = 0; r < kRanks; ++r) {
          const std::vector<double> g = normals(kN * kM, 70 + static_cast<uint32_t>(10 * step + r));
          for (size_t i = 0; i < kN * kM; ++i) {
            grads[static_cast<size_t>(r)][i] = static_cast<float>(g[i]);
            in_total[i] += grads[static_cast<size_t>(r)][i];
          }
        }
      }
      collective_round(states, grads);
      for (int r = 1; r < kRanks; ++r) ASSERT_EQ(grads[static_cast<size_t>(r)], grads[0]);
      for (size_t i = 0; i < kN * kM; ++i) sent_total[i] += grads[0][i];
    }
    const double error = relative_error(sent_total, in_total);
    if (feedback) {
      EXPECT_LT(error, 1e-5);
    } else {
      EXPECT_GT(error, 0.1);
    }
  }
}

// Residuals (8 x 6), P (8 x 2) and Q (6 x 2) factors, the uncompressed
// vector (10) in f32 and the double scratch (max(8, 6) x 2) are reported
// for the state's lifetime.
TEST(PowerSgdCompressor, BucketStateMemoryIsReported) {
  const int64_t before = comm_bytes_tracked();
  {
    const Compressors c("powersgd", "rank = 2");
    const State s(c, 0, make_bucket(58, 1, 0, 0, {{0, 1, 10}, {10, 8, 6}}));
    EXPECT_EQ(comm_bytes_tracked() - before, (48 + 16 + 12 + 10) * 4 + 16 * 8);
  }
  EXPECT_EQ(comm_bytes_tracked(), before);
}

// Reduced over another number of ranks than planned: refused.
TEST(PowerSgdCompressor, RefusesAWorldItWasNotPlannedFor) {
  const Compressors c("powersgd", "", 2);
  std::vector<State> states;
  states.emplace_back(c, 0, make_bucket(16, 4, 0, 0, {{0, 4, 4}}));
  states.emplace_back(c, 1, make_bucket(16, 4, 1, 0, {{0, 4, 4}}));
  Grads grads(2, std::vector<float>(16, 1.0F));
  try {
    collective_round(states, grads);
    ADD_FAILURE() << "reduce over 2 ranks of a bucket planned for 4 succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("planned for 4 ranks"), std::string::npos) << e.what();
  }
}

TEST(PowerSgdCompressor, RefusesTensorsOutsideTheBucket) {
  const Compressors c("powersgd", "");
  try {
    const State s(c, 0, make_bucket(16, 1, 0, 0, {{4, 4, 4}}));
    ADD_FAILURE() << "a 4 x 4 tensor at 4 in a bucket of 16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ends outside the bucket of 16"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::test

// Synthetic sources: seeded, and learnable by a trivial model.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tessera/core/data/sampler.hpp"
#include "tessera/core/data/synthetic.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

TEST(SyntheticSequences, WithoutNoiseEveryTokenFollowsTheRule) {
  const SyntheticSequences data(DataShape::sequences(16, 32), 3, 0.0);
  const DistributedSampler sampler(data, 3, 8, 0, 1);
  const Batch b = sampler.global_batch(1);
  const std::vector<int32_t>& next = data.rule();
  for (int64_t row = 0; row < b.size; ++row) {
    for (int64_t t = 0; t < 16; ++t) {
      const size_t i = static_cast<size_t>(row * 16 + t);
      ASSERT_GE(b.tokens[i], 0);
      ASSERT_LT(b.tokens[i], 32);
      EXPECT_EQ(b.targets[i], next[static_cast<size_t>(b.tokens[i])]);
      if (t + 1 < 16) {
        EXPECT_EQ(b.tokens[i + 1], b.targets[i]);  // targets are inputs shifted by one
      }
    }
  }
}

TEST(SyntheticSequences, RuleIsAPermutationDrawnFromTheSeed) {
  const SyntheticSequences a(DataShape::sequences(4, 64), 1, 0.0);
  const SyntheticSequences b(DataShape::sequences(4, 64), 1, 0.0);
  const SyntheticSequences c(DataShape::sequences(4, 64), 2, 0.0);
  EXPECT_EQ(a.rule(), b.rule());
  EXPECT_NE(a.rule(), c.rule());
  std::vector<int> seen(64, 0);
  for (const int32_t v : a.rule()) {
    ++seen[static_cast<size_t>(v)];
  }
  EXPECT_EQ(seen, std::vector<int>(64, 1));
}

// A bigram count table fitted on a few batches predicts held-out batches'
// targets at about 1 - noise accuracy, far above chance (1 / vocab): the
// task is learnable, so a real model's loss falls.
TEST(SyntheticSequences, BigramModelLearnsTheTask) {
  const int64_t vocab = 64;
  const double noise = 0.05;
  const SyntheticSequences data(DataShape::sequences(32, vocab), 11, noise);
  const DistributedSampler sampler(data, 11, 16, 0, 1);
  std::vector<std::vector<int>> counts(vocab, std::vector<int>(vocab, 0));
  for (int64_t step = 1; step <= 20; ++step) {
    const Batch b = sampler.global_batch(step);
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      ++counts[static_cast<size_t>(b.tokens[i])][static_cast<size_t>(b.targets[i])];
    }
  }
  int64_t right = 0;
  int64_t total = 0;
  for (int64_t step = 1000; step < 1005; ++step) {
    const Batch b = sampler.global_batch(step);
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      const auto& row = counts[static_cast<size_t>(b.tokens[i])];
      const auto best = std::max_element(row.begin(), row.end()) - row.begin();
      right += best == b.targets[i] ? 1 : 0;
      ++total;
    }
  }
  const double accuracy = static_cast<double>(right) / static_cast<double>(total);
  EXPECT_GT(accuracy, 1.0 - 3.0 * noise);
}

TEST(SyntheticSequences, RejectsBadShapes) {
  EXPECT_THROW(SyntheticSequences(DataShape::sequences(0, 10), 1, 0.1), Error);
  EXPECT_THROW(SyntheticSequences(DataShape::sequences(4, 1), 1, 0.1), Error);
  EXPECT_THROW(SyntheticSequences(DataShape::sequences(4, 10), 1, 1.5), Error);
}

// Nearest-centre classification of held-out points, with centres estimated
// from training batches, is far above chance.
TEST(SyntheticClusters, NearestCentreClassifierLearnsTheTask) {
  const int64_t f_len = 8;
  const int64_t classes = 5;
  const SyntheticClusters data(DataShape::classification(f_len, classes), 4, 3.0);
  const DistributedSampler sampler(data, 4, 64, 0, 1);
  std::vector<double> sums(static_cast<size_t>(classes * f_len), 0.0);
  std::vector<int64_t> seen(static_cast<size_t>(classes), 0);
  for (int64_t step = 1; step <= 10; ++step) {
    const Batch b = sampler.global_batch(step);
    for (int64_t row = 0; row < b.size; ++row) {
      const auto label = static_cast<size_t>(b.targets[static_cast<size_t>(row)]);
      ASSERT_LT(label, static_cast<size_t>(classes));
      ++seen[label];
      for (int64_t f = 0; f < f_len; ++f) {
        sums[label * f_len + f] += b.inputs[static_cast<size_t>(row * f_len + f)];
      }
    }
  }
  int64_t right = 0;
  const Batch test = sampler.global_batch(999);
  for (int64_t row = 0; row < test.size; ++row) {
    int64_t best = -1;
    double best_dist = std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < classes; ++c) {
      ASSERT_GT(seen[static_cast<size_t>(c)], 0) << "class " << c << " never drawn";
      double dist = 0.0;
      for (int64_t f = 0; f < f_len; ++f) {
        const double mean = sums[static_cast<size_t>(c * f_len + f)] /
                            static_cast<double>(seen[static_cast<size_t>(c)]);
        const double d = test.inputs[static_cast<size_t>(row * f_len + f)] - mean;
        dist += d * d;
      }
      if (dist < best_dist) {
        best_dist = dist;
        best = c;
      }
    }
    right += best == test.targets[static_cast<size_t>(row)] ? 1 : 0;
  }
  EXPECT_GT(static_cast<double>(right) / static_cast<double>(test.size), 0.9);
}

TEST(SyntheticClusters, CentresComeFromTheSeed) {
  const SyntheticClusters a(DataShape::classification(3, 2), 1, 3.0);
  const SyntheticClusters b(DataShape::classification(3, 2), 1, 3.0);
  const SyntheticClusters c(DataShape::classification(3, 2), 2, 3.0);
  EXPECT_EQ(a.centre(1), b.centre(1));
  EXPECT_NE(a.centre(1), c.centre(1));
  EXPECT_THROW((void)a.centre(2), Error);
  EXPECT_THROW(SyntheticClusters(DataShape::classification(3, 1), 1, 3.0), Error);
  EXPECT_THROW(SyntheticClusters(DataShape::classification(0, 2), 1, 3.0), Error);
}

}  // namespace
}  // namespace tessera

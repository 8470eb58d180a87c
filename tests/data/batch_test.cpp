// Batch layout, slicing and micro-batch splits.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tessera/core/data/batch.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

Batch numbered_sequences(int64_t size, int64_t seq_len) {
  Batch b = Batch::make(size, seq_len, 0);
  std::iota(b.tokens.begin(), b.tokens.end(), 0);
  std::iota(b.targets.begin(), b.targets.end(), 1000);
  return b;
}

TEST(Batch, MakeSizesEachLayout) {
  const Batch seq = Batch::make(3, 4, 0);
  EXPECT_TRUE(seq.is_sequence());
  EXPECT_EQ(seq.tokens.size(), 12U);
  EXPECT_EQ(seq.targets.size(), 12U);
  EXPECT_TRUE(seq.inputs.empty());
  const Batch cls = Batch::make(3, 0, 5);
  EXPECT_FALSE(cls.is_sequence());
  EXPECT_EQ(cls.inputs.size(), 15U);
  EXPECT_EQ(cls.targets.size(), 3U);
  EXPECT_TRUE(cls.tokens.empty());
  EXPECT_THROW((void)Batch::make(3, 4, 5), Error);
  EXPECT_THROW((void)Batch::make(3, 0, 0), Error);
}

TEST(Batch, SliceCopiesRowsAndKeepsPosition) {
  Batch b = numbered_sequences(5, 3);
  b.first = 10;
  const Batch s = b.slice(1, 2);
  EXPECT_EQ(s.size, 2);
  EXPECT_EQ(s.first, 11);
  EXPECT_EQ(s.tokens, (std::vector<int32_t>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(s.targets, (std::vector<int32_t>{1003, 1004, 1005, 1006, 1007, 1008}));
  EXPECT_THROW((void)b.slice(4, 2), Error);
  EXPECT_THROW((void)b.slice(-1, 1), Error);
}

TEST(Batch, SplitSizesGiveTheRemainderToTheFirstParts) {
  EXPECT_EQ(split_sizes(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(split_sizes(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(split_sizes(2, 3), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_THROW((void)split_sizes(4, 0), Error);
}

TEST(Batch, SplitBatchConcatenatesBackToTheBatch) {
  const Batch b = numbered_sequences(7, 2);
  const std::vector<Batch> parts = split_batch(b, 3);
  ASSERT_EQ(parts.size(), 3U);
  EXPECT_EQ(parts[0].size, 3);
  EXPECT_EQ(parts[1].size, 2);
  EXPECT_EQ(parts[2].size, 2);
  std::vector<int32_t> tokens;
  for (const Batch& p : parts) {
    tokens.insert(tokens.end(), p.tokens.begin(), p.tokens.end());
  }
  EXPECT_EQ(tokens, b.tokens);
  EXPECT_EQ(parts[2].first, 5);
  EXPECT_THROW((void)split_batch(b, 8), Error);
  EXPECT_THROW((void)split_batch(b, 0), Error);
}

}  // namespace
}  // namespace tessera

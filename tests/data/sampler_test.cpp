// The distributed sampler: global batches depend on (seed, step) only and
// the ranks' slices tile them exactly.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tessera/core/data/sampler.hpp"
#include "tessera/core/data/synthetic.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

DataShape sequence_shape() { return DataShape::sequences(6, 50); }

DataShape cluster_shape() { return DataShape::classification(3, 4); }

// Concatenates batches of one layout in order.
Batch concat(const std::vector<Batch>& parts) {
  Batch out = parts.front();
  for (size_t k = 1; k < parts.size(); ++k) {
    const Batch& p = parts[k];
    EXPECT_EQ(p.first, out.first + out.size) << "part " << k << " is not contiguous";
    out.size += p.size;
    out.tokens.insert(out.tokens.end(), p.tokens.begin(), p.tokens.end());
    out.targets.insert(out.targets.end(), p.targets.begin(), p.targets.end());
    out.inputs.insert(out.inputs.end(), p.inputs.begin(), p.inputs.end());
  }
  return out;
}

void expect_same(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.size, b.size);
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_EQ(a.inputs, b.inputs);
}

class SamplerTiling : public ::testing::TestWithParam<bool> {};

TEST_P(SamplerTiling, RankSlicesTileTheSingleProcessBatch) {
  const bool sequences = GetParam();
  std::unique_ptr<Dataset> data;
  if (sequences) {
    data = std::make_unique<SyntheticSequences>(sequence_shape(), 9, 0.1);
  } else {
    data = std::make_unique<SyntheticClusters>(cluster_shape(), 9, 3.0);
  }
  const int64_t global = 11;  // uneven for W = 2, 3, 4
  const DistributedSampler alone(*data, 1234, global, 0, 1);
  for (const int64_t step : {1, 2, 57}) {
    const Batch reference = alone.global_batch(step);
    expect_same(alone.rank_batch(step), reference);
    for (int world = 1; world <= 4; ++world) {
      std::vector<Batch> parts;
      int64_t expected_begin = 0;
      for (int rank = 0; rank < world; ++rank) {
        const DistributedSampler sampler(*data, 1234, global, rank, world);
        const BatchSlice slice = sampler.slice();
        EXPECT_EQ(slice.begin, expected_begin) << "world " << world << " rank " << rank;
        // The first global % world ranks hold one example more.
        EXPECT_EQ(slice.count, global / world + (rank < global % world ? 1 : 0));
        expected_begin += slice.count;
        parts.push_back(sampler.rank_batch(step));
      }
      EXPECT_EQ(expected_begin, global);  // disjoint and covering, in order
      SCOPED_TRACE(testing::Message() << "world " << world << ", step " << step);
      expect_same(concat(parts), reference);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, SamplerTiling, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return std::string(param.param ? "Sequences" : "Clusters");
                         });

TEST(Sampler, BatchesDependOnSeedAndStepOnly) {
  const SyntheticSequences data(sequence_shape(), 9, 0.1);
  const DistributedSampler a(data, 7, 8, 0, 1);
  const DistributedSampler b(data, 7, 8, 0, 1);
  expect_same(a.global_batch(3), b.global_batch(3));
  EXPECT_NE(a.global_batch(3).tokens, a.global_batch(4).tokens);
  const DistributedSampler other_seed(data, 8, 8, 0, 1);
  EXPECT_NE(a.global_batch(3).tokens, other_seed.global_batch(3).tokens);
}

TEST(Sampler, MicroBatchesSplitTheRankSlice) {
  const SyntheticClusters data(cluster_shape(), 9, 3.0);
  const DistributedSampler sampler(data, 5, 10, 1, 3);  // rank 1 of 3: examples 4..6
  const std::vector<Batch> micro = sampler.micro_batches(2, 2);
  ASSERT_EQ(micro.size(), 2U);
  EXPECT_EQ(micro[0].size, 2);
  EXPECT_EQ(micro[1].size, 1);
  EXPECT_EQ(micro[0].first, 4);
  expect_same(concat(micro), sampler.rank_batch(2));
  EXPECT_THROW((void)sampler.micro_batches(2, 4), Error);
  EXPECT_THROW((void)sampler.micro_batches(2, 0), Error);
}

// A batch big enough to be filled by several threads (threads_per_rank) is
// the batch one thread fills, row for row, and a failing row still fails it.
TEST(Sampler, ABatchFilledByThreadsIsTheOneThreadBatch) {
  const SyntheticClusters data(DataShape::classification(16, 4096), 9, 3.0);
  const DistributedSampler sampler(data, 5, 192, 1, 3);  // 64 rows of 4096: up to 4 threads
  Batch one;
  {
    const IntraOpThreadsGuard threads(1);
    one = sampler.rank_batch(4);
  }
  for (const int threads : {2, 3, 8}) {
    SCOPED_TRACE(threads);
    const IntraOpThreadsGuard guard(threads);
    expect_same(sampler.rank_batch(4), one);
  }
}

struct FailingRow final : Dataset {
  [[nodiscard]] const DataShape& shape() const noexcept override { return shape_; }
  [[nodiscard]] std::string describe() const override { return "failing"; }
  void fill(uint64_t /*key*/, Batch& /*batch*/, int64_t row) const override {
    if (row == 30) throw Error(TESSERA_ERR_INVALID_ARGUMENT, "row 30 is unreadable");
  }
  DataShape shape_ = DataShape::sequences(4096, 100);  // 32 rows: two threads
};

TEST(Sampler, AFailingRowFailsTheBatchOnAnyThread) {
  const FailingRow data;
  const DistributedSampler sampler(data, 1, 32, 0, 1);
  for (const int threads : {1, 4}) {
    const IntraOpThreadsGuard guard(threads);
    EXPECT_THROW((void)sampler.global_batch(0), Error) << threads << " threads";
  }
}

TEST(Sampler, RejectsImpossibleSplits) {
  const SyntheticSequences data(sequence_shape(), 9, 0.1);
  EXPECT_THROW(DistributedSampler(data, 1, 3, 0, 4), Error);  // batch < ranks
  EXPECT_THROW(DistributedSampler(data, 1, 8, 4, 4), Error);
  EXPECT_THROW(DistributedSampler(data, 1, 8, -1, 4), Error);
  EXPECT_THROW(DistributedSampler(data, 1, 8, 0, 0), Error);
}

}  // namespace
}  // namespace tessera

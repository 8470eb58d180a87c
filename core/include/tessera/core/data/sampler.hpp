// The distributed sampler: which examples each data-parallel rank trains on.
//
// The global batch of step s is B examples whose keys are
// sample_key(seed, s, i) for i = 0..B-1, so it depends on (seed, s) only,
// never on the number of ranks. Rank r of W takes the contiguous slice
// [begin(r), begin(r) + count(r)) where the first B % W ranks hold
// B / W + 1 examples and the others B / W. Concatenating the slices of all
// ranks in rank order gives exactly the batch one process would use.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/data/batch.hpp"
#include "tessera/core/data/dataset.hpp"

namespace tessera {

// A contiguous range of the global batch.
struct BatchSlice {
  int64_t begin = 0;
  int64_t count = 0;
};

class DistributedSampler {
 public:
  // Samples `global_batch` examples per step from `dataset` (which must
  // outlive the sampler) for data-parallel rank `rank` of `world`. Throws
  // tessera::Error (invalid argument) naming the values when world < 1,
  // rank outside [0, world), or global_batch < world (every rank needs at
  // least one example).
  DistributedSampler(const Dataset& dataset, uint64_t seed, int64_t global_batch, int rank,
                     int world);

  // The slice of the global batch that `rank` of `world` owns (no checks
  // beyond those of split_sizes).
  static BatchSlice slice(int64_t global_batch, int rank, int world);
  // This sampler's own slice.
  [[nodiscard]] BatchSlice slice() const noexcept { return slice_; }

  // A batch of many elements (at least 2^16 per thread) is filled by up to
  // intra_op_threads() threads, each a contiguous run of rows; every row
  // comes from its own key, so the result does not depend on the count.
  //
  // The whole global batch of `step` (what a single process trains on).
  [[nodiscard]] Batch global_batch(int64_t step) const;
  // This rank's part of the global batch of `step` (first = slice().begin).
  [[nodiscard]] Batch rank_batch(int64_t step) const;
  // This rank's part split into `micro` micro-batches (split_batch). Throws
  // tessera::Error (invalid argument) when micro < 1 or micro exceeds the
  // rank's example count.
  [[nodiscard]] std::vector<Batch> micro_batches(int64_t step, int64_t micro) const;

  [[nodiscard]] int64_t global_batch_size() const noexcept { return global_batch_; }

 private:
  [[nodiscard]] Batch examples(int64_t step, int64_t begin, int64_t count) const;

  const Dataset& dataset_;
  uint64_t seed_;
  int64_t global_batch_;
  BatchSlice slice_;
};

}  // namespace tessera

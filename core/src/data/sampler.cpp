// Deterministic global batches split across data-parallel ranks.
#include "tessera/core/data/sampler.hpp"

#include "tessera/sdk/error.hpp"
#include "tessera/sdk/rng.hpp"

namespace tessera {

DistributedSampler::DistributedSampler(const Dataset& dataset, uint64_t seed, int64_t global_batch,
                                       int rank, int world)
    : dataset_(dataset), seed_(seed), global_batch_(global_batch) {
  TESSERA_CHECK(world >= 1, TESSERA_ERR_INVALID_ARGUMENT, "sampler: world size ", world,
                " must be >= 1");
  TESSERA_CHECK(rank >= 0 && rank < world, TESSERA_ERR_INVALID_ARGUMENT, "sampler: rank ", rank,
                " is outside [0, ", world, ")");
  TESSERA_CHECK(global_batch >= world, TESSERA_ERR_INVALID_ARGUMENT,
                "sampler: data.batch_size = ", global_batch, " is smaller than the ", world,
                " data-parallel ranks (each needs at least one example)");
  slice_ = slice(global_batch, rank, world);
}

BatchSlice DistributedSampler::slice(int64_t global_batch, int rank, int world) {
  const std::vector<int64_t> sizes = split_sizes(global_batch, world);
  TESSERA_CHECK(rank >= 0 && rank < world, TESSERA_ERR_INVALID_ARGUMENT, "sampler: rank ", rank,
                " is outside [0, ", world, ")");
  BatchSlice out;
  for (int r = 0; r < rank; ++r) {
    out.begin += sizes[static_cast<size_t>(r)];
  }
  out.count = sizes[static_cast<size_t>(rank)];
  return out;
}

Batch DistributedSampler::examples(int64_t step, int64_t begin, int64_t count) const {
  const DataShape& shape = dataset_.shape();
  Batch batch = Batch::make(count, shape.is_sequence() ? shape.seq_len : 0,
                            shape.is_sequence() ? 0 : shape.features);
  batch.first = begin;
  for (int64_t row = 0; row < count; ++row) {
    const uint64_t key =
        sample_key(seed_, static_cast<uint64_t>(step), static_cast<uint64_t>(begin + row));
    dataset_.fill(key, batch, row);
  }
  return batch;
}

Batch DistributedSampler::global_batch(int64_t step) const {
  return examples(step, 0, global_batch_);
}

Batch DistributedSampler::rank_batch(int64_t step) const {
  return examples(step, slice_.begin, slice_.count);
}

std::vector<Batch> DistributedSampler::micro_batches(int64_t step, int64_t micro) const {
  TESSERA_CHECK(micro >= 1 && micro <= slice_.count, TESSERA_ERR_INVALID_ARGUMENT,
                "sampler: ", micro, " micro-batches do not fit this rank's ", slice_.count,
                " examples (each micro-batch needs at least one)");
  return split_batch(rank_batch(step), micro);
}

}  // namespace tessera

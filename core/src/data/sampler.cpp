// Deterministic global batches split across data-parallel ranks.
#include "tessera/core/data/sampler.hpp"

#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

#include "tessera/core/host_api.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/rng.hpp"

namespace tessera {
namespace {

// Elements of examples (features, or tokens of a window) one thread fills
// at least: starting a thread costs about what generating this many does.
constexpr int64_t kMinElementsPerThread = int64_t{1} << 16;

}  // namespace

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
  const auto fill_rows = [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const uint64_t key =
          sample_key(seed_, static_cast<uint64_t>(step), static_cast<uint64_t>(begin + row));
      dataset_.fill(key, batch, row);
    }
  };
  // Every row is generated from its own key, so the rows may be filled by
  // the rank's intra-op threads (run.threads_per_rank) in contiguous
  // chunks with the same result; a large batch (a GPU's) is then not held
  // up by one core generating it.
  const int64_t row_elements =
      std::max<int64_t>(shape.is_sequence() ? shape.seq_len : shape.features, 1);
  const int64_t by_work = count * row_elements / kMinElementsPerThread;
  const int64_t threads = std::clamp<int64_t>(std::min<int64_t>(intra_op_threads(), by_work), 1,
                                              std::max<int64_t>(count, 1));
  if (threads == 1) {
    fill_rows(0, count);
    return batch;
  }
  const auto bound = [&](int64_t t) { return count * t / threads; };
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  {
    std::vector<std::jthread> workers;
    workers.reserve(static_cast<size_t>(threads - 1));
    for (int64_t t = 1; t < threads; ++t) {
      workers.emplace_back([&, t] {
        try {
          fill_rows(bound(t), bound(t + 1));
        } catch (...) {
          errors[static_cast<size_t>(t)] = std::current_exception();
        }
      });
    }
    try {
      fill_rows(0, bound(1));
    } catch (...) {
      errors[0] = std::current_exception();
    }
  }  // joins the workers
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
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

// The in-place communication of `zero1` (see shard_grid.hpp).
#include "shard_grid.hpp"

#include <algorithm>

#include "tessera/sdk/error.hpp"

namespace tessera::strategies {

namespace {
// A CPU buffer of the f32 elements of `data`.
tessera_buffer cpu_f32(std::span<float> data) {
  return tessera_buffer{data.data(), data.size(), TESSERA_F32,
                        tessera_device{TESSERA_DEVICE_CPU, 0}};
}
}  // namespace

ShardGrid::ShardGrid(const sdk::Host& host, sdk::CommView& comm, const sdk::FlatLayout& layout,
                     uint64_t first_capacity, uint64_t capacity, const sdk::GradCodec& codec)
    : host_(host),
      comm_(comm),
      total_(layout.total()),
      padded_total_(sdk::even_shard(layout.total(), comm.size(), comm.rank()).padded_total),
      world_(comm.size()),
      rank_(comm.rank()),
      buckets_(sdk::plan_shard_buckets(layout, comm.size(), first_capacity, capacity)),
      schedule_(buckets_) {
  pending_.resize(buckets_.size());
  const auto w = static_cast<uint64_t>(world_);
  const auto r = static_cast<uint64_t>(rank_);
  for (const sdk::GradBucket& b : buckets_) {
    const uint64_t len = b.range.size() / w;
    const uint64_t begin = std::min(b.range.begin + r * len, total_);
    const uint64_t end = std::min(begin + len, total_);
    blocks_.push_back(Block{{begin, end}, shard_elements_});
    shard_elements_ += len;
    codecs_.emplace_back(
        host, rank_, codec,
        sdk::describe_bucket(layout, b.range, static_cast<int32_t>(codecs_.size()), world_, rank_));
  }
}

std::span<float> ShardGrid::block_of(std::span<float> data, size_t b) const noexcept {
  const sdk::FlatRange range = buckets_[b].range;
  const uint64_t len = range.size() / static_cast<uint64_t>(world_);
  return data.subspan(static_cast<size_t>(range.begin + static_cast<uint64_t>(rank_) * len),
                      static_cast<size_t>(len));
}

void ShardGrid::begin_step(std::span<float> grads) {
  TESSERA_CHECK(grads.size() == padded_total_, TESSERA_ERR_INTERNAL, "zero1: gradient buffer of ",
                grads.size(), " elements for a padded model of ", padded_total_);
  grads_ = grads;
  schedule_.reset();
}

void ShardGrid::unit_done(int32_t unit) {
  schedule_.after_unit(unit, [this](size_t b) { start(b); });
}

void ShardGrid::start(size_t b) {
  if (world_ <= 1) return;  // the local gradients are the sums
  const sdk::FlatRange range = buckets_[b].range;
  const std::span<float> bucket =
      grads_.subspan(static_cast<size_t>(range.begin), static_cast<size_t>(range.size()));
  // In place: the receive block is this rank's block of the send buffer.
  codecs_[b].start_reduce_scatter(comm_, bucket, block_of(grads_, b));
}

void ShardGrid::finish() {
  try {
    schedule_.start_rest([this](size_t b) { start(b); });
    for (sdk::BucketCodec& c : codecs_) c.finish();
  } catch (...) {
    abandon();
    throw;
  }
  grads_ = {};
}

void ShardGrid::abandon() noexcept {
  // Replacing a pending operation waits for it and drops its error.
  for (sdk::PendingOp& op : pending_) op = sdk::PendingOp{};
  for (sdk::BucketCodec& c : codecs_) c.abandon();
  grads_ = {};
}

void ShardGrid::allgather(std::span<float> params) {
  TESSERA_CHECK(params.size() == padded_total_, TESSERA_ERR_INTERNAL, "zero1: parameter buffer of ",
                params.size(), " elements for a padded model of ", padded_total_);
  if (world_ <= 1) return;
  try {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const sdk::FlatRange range = buckets_[b].range;
      const std::span<float> bucket =
          params.subspan(static_cast<size_t>(range.begin), static_cast<size_t>(range.size()));
      // In place: the send block is this rank's block of the receive buffer.
      pending_[b] = comm_.start(sdk::CommView::args(
          TESSERA_COLL_ALLGATHER, cpu_f32(block_of(params, b)), cpu_f32(bucket), TESSERA_SUM));
    }
    for (sdk::PendingOp& op : pending_) op.wait(host_);
  } catch (...) {
    abandon();
    throw;
  }
}

}  // namespace tessera::strategies

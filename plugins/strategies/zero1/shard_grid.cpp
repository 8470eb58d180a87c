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
                     uint64_t first_capacity, uint64_t capacity, const sdk::GradCodec& codec,
                     sdk::NodeGroups* nodes)
    : host_(host),
      comm_(comm),
      total_(layout.total()),
      padded_total_(sdk::even_shard(layout.total(), comm.size(), comm.rank()).padded_total),
      world_(comm.size()),
      rank_(comm.rank()),
      buckets_(sdk::plan_shard_buckets(layout, comm.size(), first_capacity, capacity)),
      schedule_(buckets_),
      nodes_(nodes),
      permuted_(nodes != nullptr && nodes->local_size() > 1 && nodes->nodes() > 1) {
  pending_.resize(buckets_.size());
  scratch_.resize(buckets_.size());
  node_ops_.resize(buckets_.size());
  const auto w = static_cast<uint64_t>(world_);
  const auto r = static_cast<uint64_t>(rank_);
  for (const sdk::GradBucket& b : buckets_) {
    const uint64_t len = b.range.size() / w;
    const uint64_t begin = std::min(b.range.begin + r * len, total_);
    const uint64_t end = std::min(begin + len, total_);
    blocks_.push_back(Block{{begin, end}, shard_elements_});
    shard_elements_ += len;
    const auto index = static_cast<int32_t>(codecs_.size());
    if (nodes_ == nullptr) {
      codecs_.emplace_back(host, rank_, codec,
                           sdk::describe_bucket(layout, b.range, index, world_, rank_));
      continue;
    }
    // The M blocks this rank reduces across the nodes lie L blocks apart
    // (in block order): no parameter's shape, so one vector (the codec
    // can only be summable here: zero1 takes no other).
    sdk::CompressBucket desc;
    desc.index = index;
    desc.elements = len * static_cast<uint64_t>(nodes_->nodes());
    desc.world_size = nodes_->nodes();
    desc.rank = nodes_->node();
    codecs_.emplace_back(host, rank_, codec, desc);
  }
}

std::span<float> ShardGrid::bucket_of(std::span<float> data, size_t b) const noexcept {
  const sdk::FlatRange range = buckets_[b].range;
  return data.subspan(static_cast<size_t>(range.begin), static_cast<size_t>(range.size()));
}

std::span<float> ShardGrid::node_work(std::span<float> data, size_t b, bool make) {
  if (!permuted_) return bucket_of(data, b);
  if (make) {
    scratch_[b] = sdk::TrackedBuffer<float>(host_, rank_, TESSERA_MEM_COMM,
                                            static_cast<size_t>(buckets_[b].range.size()));
  }
  return scratch_[b].span();
}

std::span<float> ShardGrid::chunk(std::span<float> work) const noexcept {
  const size_t len = work.size() / static_cast<size_t>(nodes_->local_size());
  return work.subspan(static_cast<size_t>(nodes_->local_rank()) * len, len);
}

std::span<float> ShardGrid::own(std::span<float> work) const noexcept {
  const std::span<float> mine = chunk(work);
  const size_t len = mine.size() / static_cast<size_t>(nodes_->nodes());
  return mine.subspan(static_cast<size_t>(nodes_->node()) * len, len);
}

void ShardGrid::permute(std::span<float> blocks, std::span<float> node_order,
                        bool back) const noexcept {
  const auto l_count = static_cast<size_t>(nodes_->local_size());
  const auto m_count = static_cast<size_t>(nodes_->nodes());
  const size_t len = blocks.size() / (l_count * m_count);
  for (size_t l = 0; l < l_count; ++l) {
    for (size_t m = 0; m < m_count; ++m) {
      float* in_blocks = blocks.data() + (m * l_count + l) * len;
      float* in_nodes = node_order.data() + (l * m_count + m) * len;
      if (back) {
        std::copy_n(in_nodes, len, in_blocks);
      } else {
        std::copy_n(in_blocks, len, in_nodes);
      }
    }
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
  if (nodes_ != nullptr) {
    const std::span<float> work = node_work(grads_, b, true);
    if (permuted_) permute(bucket_of(grads_, b), work, false);
    if (nodes_->local_size() > 1) {
      // In place: the receive chunk is this local rank's chunk of the send buffer.
      node_ops_[b] = nodes_->intra().start(
          sdk::CommView::args(TESSERA_COLL_REDUCE_SCATTER, cpu_f32(work), cpu_f32(chunk(work))));
    }
    return;
  }
  // In place: the receive block is this rank's block of the send buffer.
  codecs_[b].start_reduce_scatter(comm_, bucket_of(grads_, b), block_of(grads_, b));
}

// Each bucket's cross-node reduce-scatter starts as soon as its node-level
// one is done, so they overlap the later buckets' node-level ones.
void ShardGrid::finish_nodes() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    node_ops_[b].wait(host_);
    const std::span<float> work = node_work(grads_, b, false);
    codecs_[b].start_reduce_scatter(nodes_->inter(), chunk(work), own(work));
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    codecs_[b].finish();
    if (!permuted_) continue;  // reduced in place into the rank's block
    const std::span<float> mine = own(scratch_[b].span());
    std::copy(mine.begin(), mine.end(), block_of(grads_, b).begin());
    scratch_[b].release();
  }
}

void ShardGrid::finish() {
  try {
    schedule_.start_rest([this](size_t b) { start(b); });
    if (nodes_ != nullptr && world_ > 1) {
      finish_nodes();
    } else {
      for (sdk::BucketCodec& c : codecs_) c.finish();
    }
  } catch (...) {
    abandon();
    throw;
  }
  grads_ = {};
}

void ShardGrid::abandon() noexcept {
  // Replacing a pending operation waits for it and drops its error.
  for (sdk::PendingOp& op : pending_) op = sdk::PendingOp{};
  for (sdk::PendingOp& op : node_ops_) op = sdk::PendingOp{};
  for (sdk::BucketCodec& c : codecs_) c.abandon();
  for (sdk::TrackedBuffer<float>& s : scratch_) s.release();
  grads_ = {};
}

void ShardGrid::allgather_nodes(std::span<float> params) {
  // Across the nodes: this local rank's M blocks, in place in its chunk.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const std::span<float> work = node_work(params, b, true);
    if (permuted_) {
      const std::span<float> mine = block_of(params, b);
      std::copy(mine.begin(), mine.end(), own(work).begin());
    }
    pending_[b] = nodes_->inter().start(
        sdk::CommView::args(TESSERA_COLL_ALLGATHER, cpu_f32(own(work)), cpu_f32(chunk(work))));
  }
  // Inside the node: every local rank's chunk, in place.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b].wait(host_);
    if (nodes_->local_size() <= 1) continue;
    const std::span<float> work = node_work(params, b, false);
    node_ops_[b] = nodes_->intra().start(
        sdk::CommView::args(TESSERA_COLL_ALLGATHER, cpu_f32(chunk(work)), cpu_f32(work)));
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    node_ops_[b].wait(host_);
    if (!permuted_) continue;
    permute(bucket_of(params, b), scratch_[b].span(), true);
    scratch_[b].release();
  }
}

void ShardGrid::allgather(std::span<float> params) {
  TESSERA_CHECK(params.size() == padded_total_, TESSERA_ERR_INTERNAL, "zero1: parameter buffer of ",
                params.size(), " elements for a padded model of ", padded_total_);
  if (world_ <= 1) return;
  try {
    if (nodes_ != nullptr) {
      allgather_nodes(params);
      return;
    }
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

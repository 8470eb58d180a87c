// Bucketed gradient allreduce of the strategies that keep a full,
// replicated gradient buffer (ddp): the flat gradients are cut into buckets
// of whole parameters (reverse parameter order, plan_grad_buckets), one
// non-blocking SUM allreduce per bucket, each started as soon as its
// gradients are final and all waited for, in order, before the optimizer
// runs: afterwards every rank holds the summed gradients. (zero1's
// reduce-scatter over the shard grid, with bounded staging, lives in the
// zero1 plugin; it plans its buckets with plan_shard_buckets.)
//
// Hierarchical (NodeGroups, hierarchy = "node"): each bucket of Ψ_b
// elements is padded to P_b = L·ceil(Ψ_b/L) and reduce-scattered inside
// the node (block l of P_b/L elements to local rank l), block l is
// allreduced across the nodes through the bucket's codec, and the node
// allgathers the blocks. The reduce-scatter starts during the backward
// like the flat allreduce; finish() chains the rest: it waits for each
// bucket's reduce-scatter in plan order and starts its cross-node
// allreduce at once (so those overlap the later buckets' reduce-scatters
// and each other), then finishes each allreduce and starts its allgather,
// then waits for the allgathers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tessera/c/host.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/grad_buckets.hpp"
#include "tessera/sdk/grad_codec.hpp"
#include "tessera/sdk/node_groups.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_runner.hpp"

namespace tessera::sdk {

// How the gradient buckets are cut and sent.
struct BucketConfig {
  double first_bucket_mb = 1.0;              // capacity of the first bucket, MiB
  double bucket_mb = 25.0;                   // capacity of every later bucket, MiB
  tessera_dtype reduce_dtype = TESSERA_F32;  // wire dtype: f32, bf16 or f16
};

// One rank's bucketed reduction. Every rank builds the same plan from the
// same model and config, so all ranks post the same sequence of
// operations. Each bucket is reduced through a BucketCodec
// (grad_codec.hpp): f32, the f16/bf16 cast of reduce_dtype, or the
// compressor `codec` names; an encoding's buffers are tracked as
// TESSERA_MEM_COMM while the bucket is in flight. Not copyable or movable;
// `comm` and `layout` must outlive it.
class BucketReducer {
 public:
  // Plans the buckets. Throws tessera::Error (invalid argument) naming the
  // option when a bucket capacity is not a positive finite number of MiB,
  // and the compressor's error when it refuses a bucket. `codec` replaces
  // config.reduce_dtype when given. With `nodes` (which must outlive it)
  // the reduction is hierarchical (see the top of the file) and the codec
  // applies to the cross-node allreduce of this rank's block of each
  // bucket; the node-level phases are f32.
  BucketReducer(const Host& host, CommView& comm, const FlatLayout& layout,
                const BucketConfig& config, int32_t rank,
                const std::optional<GradCodec>& codec = std::nullopt, NodeGroups* nodes = nullptr)
      : host_(host),
        rank_(rank),
        comm_(comm),
        nodes_(nodes),
        total_(layout.total()),
        buckets_(plan(layout, config)),
        schedule_(buckets_) {
    const GradCodec c = codec ? *codec : GradCodec::cast(config.reduce_dtype);
    codecs_.reserve(buckets_.size());
    if (nodes_ != nullptr) node_buckets_.resize(buckets_.size());
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const FlatRange r = buckets_[b].range;
      if (nodes_ == nullptr) {
        codecs_.emplace_back(
            host, rank, c,
            describe_bucket(layout, r, static_cast<int32_t>(b), comm.size(), comm.rank()));
        continue;
      }
      const auto l = static_cast<uint64_t>(nodes_->local_size());
      NodeBucket& nb = node_buckets_[b];
      nb.block = (r.size() + l - 1) / l;
      // This rank's block as a flat range; past the bucket's end it is
      // padding (described as such, not as the next bucket's parameters).
      const uint64_t begin = r.begin + static_cast<uint64_t>(nodes_->local_rank()) * nb.block;
      CompressBucket desc = describe_bucket(
          layout, FlatRange{std::min(begin, r.end), std::min(begin + nb.block, r.end)},
          static_cast<int32_t>(b), nodes_->nodes(), nodes_->node());
      const uint64_t real = desc.elements;
      if (real < nb.block) {
        desc.tensors.push_back(CompressTensor{real, 1, static_cast<int64_t>(nb.block - real)});
        desc.elements = nb.block;
      }
      codecs_.emplace_back(host, rank, c, desc);
    }
  }
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;
  ~BucketReducer() = default;

  // The plan: flat ranges, in the order they are started.
  [[nodiscard]] const std::vector<GradBucket>& buckets() const noexcept { return buckets_; }

  // Starts a step whose gradients are `grads` (layout.total() elements;
  // anything else is an internal error). From the moment a bucket is
  // started until finish() returns, its part of `grads` must not be touched.
  void begin_step(std::span<float> grads) {
    TESSERA_CHECK(grads.size() == total_, TESSERA_ERR_INTERNAL,
                  "bucket reducer: gradient buffer of ", grads.size(), " elements for a model of ",
                  total_);
    grads_ = grads;
    schedule_.reset();
  }
  // The backward of `unit` on the step's last micro-batch has returned:
  // starts every complete bucket not started yet, in plan order.
  void unit_done(int32_t unit) {
    schedule_.after_unit(unit, [this](size_t b) { start(b); });
  }
  // Starts the buckets not started yet, then waits for every bucket in plan
  // order (time counted as communication wait in the communicator's stats)
  // and decodes the results into the gradients. Throws the first failed
  // operation's error after waiting for the operations still pending.
  void finish() {
    try {
      schedule_.start_rest([this](size_t b) { start(b); });
      if (nodes_ == nullptr) {
        for (BucketCodec& c : codecs_) c.finish();
      } else {
        finish_nodes();
      }
    } catch (...) {
      abandon();
      throw;
    }
    grads_ = {};
  }
  // Waits for every started operation, ignoring their errors, and ends the
  // step: the clean-up after a step failed part-way.
  void abandon() noexcept {
    for (NodeBucket& nb : node_buckets_) nb.op = PendingOp{};  // waits, dropping the error
    for (BucketCodec& c : codecs_) c.abandon();
    // Only once nothing in flight reads them.
    for (NodeBucket& nb : node_buckets_) nb.padded.release();
    grads_ = {};
  }

 private:
  static std::vector<GradBucket> plan(const FlatLayout& layout, const BucketConfig& config) {
    const uint64_t first = bucket_elements(config.first_bucket_mb, "first_bucket_mb");
    const uint64_t rest = bucket_elements(config.bucket_mb, "bucket_mb");
    return plan_grad_buckets(layout, first, rest);
  }

  // Hierarchical: one bucket's node-level state.
  struct NodeBucket {
    uint64_t block = 0;           // ceil(Ψ_b / L): each local rank's block
    TrackedBuffer<float> padded;  // L·block elements while in flight, when Ψ_b % L != 0
    PendingOp op;                 // the node-level collective in flight
  };

  [[nodiscard]] std::span<float> bucket_grads(size_t bucket) const noexcept {
    const FlatRange r = buckets_[bucket].range;
    return grads_.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size()));
  }

  void start(size_t bucket) {
    if (nodes_ == nullptr) {
      codecs_[bucket].start_allreduce(comm_, bucket_grads(bucket));
      return;
    }
    NodeBucket& nb = node_buckets_[bucket];
    const std::span<float> work = node_work(bucket, true);
    if (nodes_->local_size() <= 1) return;
    // In place: the receive block is this rank's block of the send buffer.
    nb.op = nodes_->intra().start(
        CommView::args(TESSERA_COLL_REDUCE_SCATTER, f32(work), f32(local_block(bucket, work))));
  }

  // The buffer the node-level phases of `bucket` run in: its gradients in
  // place when the bucket is a multiple of L elements, else a padded copy
  // (made when `begin`). The gradient buffer is exactly Ψ elements with the
  // buckets end to end, so a bucket cannot grow into padding in place, and
  // the backends' reduce-scatter and allgather take equal blocks; the copy
  // is tracked as COMM from the bucket's start to its finish, so the memory
  // report shows what the hierarchy costs.
  std::span<float> node_work(size_t bucket, bool begin) {
    NodeBucket& nb = node_buckets_[bucket];
    const std::span<float> grads = bucket_grads(bucket);
    const uint64_t padded = nb.block * static_cast<uint64_t>(nodes_->local_size());
    if (padded == grads.size()) return grads;
    if (begin) {
      nb.padded = TrackedBuffer<float>(host_, rank_, TESSERA_MEM_COMM, static_cast<size_t>(padded));
      std::copy(grads.begin(), grads.end(), nb.padded.data());
    }
    return nb.padded.span();
  }
  [[nodiscard]] std::span<float> local_block(size_t bucket, std::span<float> work) const noexcept {
    const auto block = static_cast<size_t>(node_buckets_[bucket].block);
    return work.subspan(static_cast<size_t>(nodes_->local_rank()) * block, block);
  }
  static tessera_buffer f32(std::span<float> v) noexcept {
    return wire_buffer(v.data(), v.size(), TESSERA_F32);
  }

  // The hierarchical phases after the reduce-scatters were started.
  void finish_nodes() {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      node_buckets_[b].op.wait(host_);
      codecs_[b].start_allreduce(nodes_->inter(), local_block(b, node_work(b, false)));
    }
    for (size_t b = 0; b < buckets_.size(); ++b) {
      codecs_[b].finish();
      if (nodes_->local_size() <= 1) continue;
      const std::span<float> work = node_work(b, false);
      // In place: the send block is this rank's block of the receive buffer.
      node_buckets_[b].op = nodes_->intra().start(
          CommView::args(TESSERA_COLL_ALLGATHER, f32(local_block(b, work)), f32(work)));
    }
    for (size_t b = 0; b < buckets_.size(); ++b) {
      NodeBucket& nb = node_buckets_[b];
      nb.op.wait(host_);
      if (nb.padded.size() > 0) {
        const std::span<float> grads = bucket_grads(b);
        std::copy_n(nb.padded.data(), grads.size(), grads.begin());
        nb.padded.release();
      }
    }
  }

  Host host_;
  int32_t rank_;
  CommView& comm_;
  NodeGroups* nodes_;  // nullptr: flat
  uint64_t total_;     // gradient elements
  std::vector<GradBucket> buckets_;
  BucketSchedule schedule_;
  std::vector<BucketCodec> codecs_;       // per bucket, in plan order (hierarchical: its block)
  std::vector<NodeBucket> node_buckets_;  // hierarchical: per bucket, in plan order
  std::span<float> grads_;
};

// Starts the buckets a unit's backward completed, on the last micro-batch
// only: earlier micro-batches just accumulate into the local gradients.
// `Reducer` is any bucketed reducer with unit_done(int32_t unit)
// (BucketReducer, or zero1's shard-grid reducer).
template <typename Reducer>
class BucketHooks final : public RunnerHooks {
 public:
  explicit BucketHooks(Reducer& reducer) : reducer_(reducer) {}
  void after_backward(int32_t unit, int32_t /*micro*/, bool last_micro) override {
    if (last_micro) reducer_.unit_done(unit);
  }

 private:
  Reducer& reducer_;
};

}  // namespace tessera::sdk

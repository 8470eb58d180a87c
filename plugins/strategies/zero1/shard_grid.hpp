// The communication of `zero1` in place in its replicated flat buffers, with
// no staging.
//
// The flat range of Ψ elements is padded to P = N·S (S = ceil(Ψ/N), the
// padding after the model's end, held by the parameter and gradient buffers
// themselves) and cut into buckets (sdk::plan_shard_buckets): contiguous
// flat ranges of N equal blocks, walked from the end of the model down, so
// that each is started as soon as the backward has produced every gradient
// it covers (units run last to first). Rank r owns block r of every bucket:
// its optimizer shard is those blocks, S elements in all. A bucket is
// reduce-scattered (SUM) in place in the gradient buffer (the receive block
// is this rank's block of the bucket), and after the optimizer every bucket
// is allgathered in place in the parameter buffer (the send block is this
// rank's block). Nothing is copied and nothing is staged.
//
// Hierarchical (NodeGroups, hierarchy = "node"; world rank r = n·L + l):
// each bucket's N blocks are copied into a COMM scratch in the order
// (l', m) ↦ block m·L + l', so that the reduce-scatter inside the node
// hands local rank l the M blocks {m·L + l} (summed over the node), and the
// reduce-scatter of those across the nodes (through the bucket's codec)
// hands node n block n·L + l = r: every rank ends with exactly its flat
// block, so the optimizer shard and checkpoints are those of the flat
// grid. The parameter allgather runs the other way round: across the nodes
// (the M blocks {m·L + l}), inside the node (all of them), and the scratch
// back into block order. Only 1/L of each bucket crosses nodes per rank.
// With one node or one rank per node the order is the block order and
// everything runs in place, with no scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/grad_buckets.hpp"
#include "tessera/sdk/grad_codec.hpp"
#include "tessera/sdk/node_groups.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::strategies {

// One rank's in-place bucket reduce-scatter and allgather. Every rank builds
// the same plan from the same model, world size and capacities, so all
// ranks post the same sequence of collectives. With one rank nothing is
// communicated (the local gradients are the sums; the parameters are
// whole). Not copyable or movable; `comm` must outlive it; not thread-safe.
class ShardGrid {
 public:
  // One of this rank's blocks: the part of a bucket it owns.
  struct Block {
    sdk::FlatRange real;        // the block ∩ [0, Ψ): the elements that exist
    uint64_t state_offset = 0;  // where the block starts in the rank's shard
  };

  // Plans the buckets: the first holds up to `first_capacity` elements,
  // later ones up to `capacity` (at least one element per rank). Throws
  // tessera::Error (invalid argument) for a bad world size or rank (see
  // sdk::even_shard).
  // Each bucket is reduced through a BucketCodec of `codec`
  // (sdk/grad_codec.hpp): in place for f32 and summable encodings. With
  // `nodes` (which must outlive it; `comm` is then the world) the
  // reduction and the allgather are hierarchical (see the top of the
  // file) and the codec applies to the cross-node reduce-scatter.
  ShardGrid(const sdk::Host& host, sdk::CommView& comm, const sdk::FlatLayout& layout,
            uint64_t first_capacity, uint64_t capacity, const sdk::GradCodec& codec,
            sdk::NodeGroups* nodes = nullptr);
  ShardGrid(const ShardGrid&) = delete;
  ShardGrid& operator=(const ShardGrid&) = delete;
  ~ShardGrid() { abandon(); }

  // The plan: flat ranges in the padded buffer, in the order they are started.
  [[nodiscard]] const std::vector<sdk::GradBucket>& buckets() const noexcept { return buckets_; }
  // This rank's blocks, one per bucket in plan order; their state offsets
  // count up from 0 in that order.
  [[nodiscard]] const std::vector<Block>& blocks() const noexcept { return blocks_; }
  // Elements of this rank's shard (S, the padding of its blocks included).
  [[nodiscard]] uint64_t shard_elements() const noexcept { return shard_elements_; }
  // Elements of padding after the model: the buffers hold Ψ + padding().
  [[nodiscard]] uint64_t padding() const noexcept { return padded_total_ - total_; }

  // Starts a step whose gradients are `grads` (Ψ + padding() elements, the
  // padding zero; anything else is an internal error). From the moment a
  // bucket is started until finish() returns, its elements must not be
  // written by the caller.
  void begin_step(std::span<float> grads);
  // The backward of `unit` on the step's last micro-batch has returned:
  // starts every complete bucket not started yet, in plan order.
  void unit_done(int32_t unit);
  // Starts the buckets not started yet, then waits for each in plan order
  // (time counted as communication wait). After it this rank's blocks of the
  // gradients hold the sums over the ranks; the other elements are
  // undefined and must not be used. Throws the first failed operation's
  // error after waiting for the operations still pending.
  void finish();
  // Waits for every operation in flight, ignoring their errors, and ends
  // the step: the clean-up after a step failed part-way.
  void abandon() noexcept;

  // Collective; no step may be in flight. `params` holds Ψ + padding()
  // elements, the padding zero; every bucket is allgathered in place, so
  // every rank's blocks are overwritten with what their owner holds.
  // Throws tessera::Error (internal) for a buffer of another size, and the
  // backend's error when an allgather fails (after waiting for the others;
  // the parameters are then partly updated).
  void allgather(std::span<float> params);

 private:
  // Starts bucket `b`'s reduce-scatter in place.
  void start(size_t b);
  // This rank's block of bucket `b` in `data` (the padded buffer).
  [[nodiscard]] std::span<float> block_of(std::span<float> data, size_t b) const noexcept;
  // Bucket `b` of `data`.
  [[nodiscard]] std::span<float> bucket_of(std::span<float> data, size_t b) const noexcept;
  // Hierarchical: where bucket `b` is worked on: `data`'s bucket in place,
  // or the scratch (allocated when `make`); its M blocks of this rank's
  // local rank (`chunk`) and its own block in there (`own`).
  std::span<float> node_work(std::span<float> data, size_t b, bool make);
  [[nodiscard]] std::span<float> chunk(std::span<float> work) const noexcept;
  [[nodiscard]] std::span<float> own(std::span<float> work) const noexcept;
  // Copies a bucket from block order into node order, or back (`back`).
  void permute(std::span<float> blocks, std::span<float> node_order, bool back) const noexcept;
  void finish_nodes();
  void allgather_nodes(std::span<float> params);

  sdk::Host host_;
  sdk::CommView& comm_;
  uint64_t total_;
  uint64_t padded_total_;
  int32_t world_;
  int32_t rank_;
  uint64_t shard_elements_ = 0;
  std::vector<sdk::GradBucket> buckets_;
  std::vector<Block> blocks_;
  sdk::BucketSchedule schedule_;
  std::vector<sdk::PendingOp> pending_;   // allgathers, per bucket in plan order
  std::vector<sdk::BucketCodec> codecs_;  // reduce-scatters, per bucket in plan order
  std::span<float> grads_;
  sdk::NodeGroups* nodes_ = nullptr;                // nullptr: flat
  bool permuted_ = false;                           // more than one node of more than one rank
  std::vector<sdk::TrackedBuffer<float>> scratch_;  // per bucket in flight, when permuted_
  std::vector<sdk::PendingOp> node_ops_;            // the node-level collective, per bucket
};

}  // namespace tessera::strategies

// The communication of `zero1` over the shard grid of its replicated flat
// buffers, with memory bounded by the bucket size.
//
// The flat range of Ψ elements is cut into N equal shards of S = ceil(Ψ/N)
// elements (sdk::even_shard, padded; rank r owns [r·S, (r+1)·S)). A bucket
// is a slice [a, b) of the shard coordinate (sdk::plan_shard_buckets): it
// covers the flat elements [r·S + a, r·S + b) of EVERY rank r. Its N pieces
// are packed in rank order into a staging buffer of N·(b - a) elements
// (padding past the model's end as zeros) and reduce-scattered (SUM): rank
// r receives the sum of its own piece, which is written into its shard of
// the gradient buffer. Buckets are walked from the end of the shard down
// and each is started as soon as the backward has produced every gradient
// it covers (units run last to first). Two staging slots are used in turn:
// bucket k reuses slot k mod 2 once bucket k - 2 has been waited for, so at
// most two buckets are in flight and the staging is about two buckets, not
// the grid.
//
// The same slots stage the allgather of the updated parameter shards after
// the optimizer: the larger slot receives N chunks of C elements and its
// receive area sends this rank's chunk.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/grad_buckets.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::strategies {

// One rank's shard-grid reduce-scatter and allgather. Every rank builds the
// same plan from the same model, world size and capacities, so all ranks
// post the same sequence of collectives. With one rank nothing is
// communicated (the local gradients are the sums; the parameters are
// whole) and nothing is staged. Not copyable or movable; `comm` and
// `layout` must outlive it; not thread-safe.
class ShardGrid {
 public:
  // Staging slots used in turn (buckets in flight at most).
  static constexpr size_t kSlots = 2;

  // Plans the buckets: the first holds up to `first_capacity` elements over
  // all ranks, later ones up to `capacity` (at least one element per rank).
  // Allocates the two slots (TESSERA_MEM_COMM of `memory_rank`): slot i is
  // N + 1 times the largest per-rank length of the buckets k with
  // k mod 2 = i (a send area and a receive area). Throws tessera::Error
  // (invalid argument) for a bad world size or rank (see sdk::even_shard).
  ShardGrid(const sdk::Host& host, sdk::CommView& comm, const sdk::FlatLayout& layout,
            uint64_t first_capacity, uint64_t capacity, int32_t memory_rank);
  ShardGrid(const ShardGrid&) = delete;
  ShardGrid& operator=(const ShardGrid&) = delete;
  ~ShardGrid() { abandon(); }

  // The plan: shard-coordinate slices, in the order they are started.
  [[nodiscard]] const std::vector<sdk::GradBucket>& buckets() const noexcept { return buckets_; }
  // This rank's shard of the flat range.
  [[nodiscard]] const sdk::ShardRange& shard() const noexcept { return shard_; }
  // Elements of f32 staged in all slots together.
  [[nodiscard]] uint64_t staging_elements() const noexcept;

  // Starts a step whose gradients are `grads` (Ψ elements; anything else is
  // an internal error). From the moment a bucket is started until finish()
  // returns, its elements of `grads` must not be written by the caller.
  void begin_step(std::span<float> grads);
  // The backward of `unit` on the step's last micro-batch has returned:
  // starts every complete bucket not started yet, in plan order, first
  // waiting for the bucket that last used each slot it needs (errors of
  // that bucket propagate as tessera::Error from the backend).
  void unit_done(int32_t unit);
  // Starts the buckets not started yet, then waits for every bucket still
  // in flight in plan order (time counted as communication wait). After it
  // this rank's real shard elements of the gradients hold the sums over
  // the ranks; the other elements hold this rank's local gradients and must
  // not be used. Throws the first failed operation's error after waiting
  // for the operations still pending.
  void finish();
  // Waits for every operation in flight, ignoring their errors, and ends
  // the step: the clean-up after a step failed part-way.
  void abandon() noexcept;

  // Collective; no step may be in flight. `params` holds the Ψ flat
  // elements; this rank's real shard elements are sent and every other
  // rank's real shard elements are overwritten with what that rank sent,
  // in chunks of the larger slot's per-rank length (one allgather each).
  // Throws tessera::Error (internal) for a buffer of another size, and the
  // backend's error when an allgather fails (the parameters are then partly
  // updated).
  void allgather(std::span<float> params);

 private:
  // A staging slot: `send` holds N blocks of `len` elements, `recv` one.
  struct Slot {
    sdk::TrackedBuffer<float> send;
    sdk::TrackedBuffer<float> recv;
    uint64_t len = 0;  // largest per-rank bucket length using the slot
  };

  // Packs bucket `b` into its slot and starts its reduce-scatter, after
  // completing the bucket that used the slot before.
  void start(size_t b);
  // Waits for bucket `b` and writes its sums into this rank's shard.
  void complete(size_t b);
  // Real (non-padding) elements of `len` starting at flat element `begin`.
  [[nodiscard]] uint64_t real_count(uint64_t begin, uint64_t len) const noexcept;

  sdk::Host host_;
  sdk::CommView& comm_;
  uint64_t total_;
  int32_t world_;
  int32_t rank_;
  sdk::ShardRange shard_;
  std::vector<sdk::GradBucket> buckets_;
  sdk::BucketSchedule schedule_;
  std::array<Slot, kSlots> slots_;
  std::vector<sdk::PendingOp> pending_;  // per bucket, in plan order
  size_t completed_ = 0;                 // buckets [0, completed_) are written back
  std::span<float> grads_;
};

}  // namespace tessera::strategies

// Per-unit gradient reduction of the strategies that shard gradients by
// unit (sdk::UnitShardLayout: ZeRO stage 2 and 3, FSDP): during backward a
// unit's gradients go to a temporary full-size buffer (the unit's backward,
// and the backward of every unit tied to its parameters, add into it);
// once they are complete the buffer is reduce-scattered (SUM) over the
// ranks (of the sharding group) and this rank's piece of the sum is ADDED
// into the caller's gradient shard (zero the piece at the start of a step
// to store instead). With a replica communicator (FSDP's hybrid_shard) the
// piece is also summed over the replicas before it is added. The
// reduce-scatter runs non-blocking while the backward goes on, and the
// gradients travel as a GradCodec says (grad_codec.hpp): f32, the bf16/f16
// cast of reduce_dtype or a summable compressor, encoded and decoded by the
// codec's per-unit state (f32 master gradients, only the bytes sent
// shrink); a gather or collective compressor only where the strategy
// allows its allreduce fallback (zero2): the unit's buffer is allreduced
// through a BucketCodec and this rank's piece kept.
// Every temporary buffer is tracked as TESSERA_MEM_COMM and lives only from
// the unit's first use in a backward pass until its reduce-scatter has been
// waited for.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "tessera/c/common.h"
#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/grad_codec.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_shards.hpp"

namespace tessera::sdk {

// Full gradient buffers and their reduce-scatters, one slot per owning
// unit. Not thread-safe; one per rank. `comm`, `shards` and the replica
// communicator must outlive it. Every rank posts the same collectives in
// the same order as long as the callers' sequence of calls depends on the
// model only. The destructor waits for reduce-scatters still in flight,
// ignoring errors.
class UnitReducer {
 public:
  // `comm` is the communicator the units are sharded over (the world, or
  // FSDP's sharding group). `wire` is the dtype of the gradients on the
  // wire: TESSERA_F32, TESSERA_BF16 or TESSERA_F16 (anything else:
  // tessera::Error, invalid argument, naming the dtype). `memory_rank` is
  // the world rank the buffers are reported for (-1: shards.rank(), right
  // when `comm` is the world). `replicas` (nullptr: none) is a communicator
  // over which this rank's reduced piece is allreduced (SUM, in `wire`)
  // before it is added: the ranks holding the same piece in other groups.
  UnitReducer(const Host& host, CommView& comm, const UnitShardLayout& shards, tessera_dtype wire,
              int32_t memory_rank = -1, CommView* replicas = nullptr)
      : UnitReducer(host, comm, shards, GradCodec::cast(check_wire(wire)), memory_rank, replicas) {}
  // The same with `codec` (GradCodec::select) in place of the wire dtype.
  // A gather or collective codec needs `allreduce_fallback` (then no
  // replicas): refused otherwise (invalid argument) naming `who` and the
  // compressor.
  UnitReducer(const Host& host, CommView& comm, const UnitShardLayout& shards,
              const GradCodec& codec, int32_t memory_rank = -1, CommView* replicas = nullptr,
              const char* who = "unit reduce", bool allreduce_fallback = false);
  UnitReducer(const UnitReducer&) = delete;
  UnitReducer& operator=(const UnitReducer&) = delete;
  ~UnitReducer() { abandon(); }

  // Unit `owner`'s full gradient buffer (gathered_elements(owner) values,
  // the unit's gradients in flat order then padding), allocated zeroed on
  // first use. If a reduce-scatter of `owner` is still in flight it is
  // completed first (finish()), so the buffer is never written while being
  // sent. Errors of that reduce-scatter propagate.
  float* grads(int32_t owner);
  // Whether `owner` has a full gradient buffer.
  [[nodiscard]] bool has_grads(int32_t owner) const { return !slot(owner).full.empty(); }
  // Collective. Starts the reduce-scatter (SUM) of `owner`'s full gradient
  // buffer (zeros if it has none); its result will be added into `piece`
  // (this rank's ceil(Ψ_u / N) elements of the unit in the gradient shard,
  // which must stay valid until finish()). With `blocking` (or one rank on
  // `comm`, then still allreduced over the replicas) the result is added
  // before returning. A unit owning no parameter posts nothing. Throws the
  // backend's error (the unit's buffers are freed).
  void start(int32_t owner, std::span<float> piece, bool blocking);
  // Waits for `owner`'s reduce-scatter if one is in flight, allreduces the
  // result over the replicas (if any), adds it into its piece (converted to
  // f32) and frees the unit's temporary buffers. Collective over the
  // replicas. Throws the backend's error (the buffers are freed anyway).
  void finish(int32_t owner);
  // finish() for every unit with a reduce-scatter in flight, in unit order.
  void finish_all() {
    for (int32_t o = 0; o < shards_.num_units(); ++o) finish(o);
  }

  // Before model unit `m`'s backward: binds the gradient slots in `ptrs` of
  // every unit whose parameters `m` uses to that unit's full gradient
  // buffer (grads(), so errors of a reduce-scatter still in flight
  // propagate).
  void bind(SlotPointers& ptrs, int32_t m) {
    for (const int32_t o : shards_.owners(m)) shards_.bind(ptrs, o, grads(o));
  }
  // After model unit `m`'s backward, once the gradients are to be reduced:
  // completes the reduce-scatters started after the previous model unit
  // (they ran during m's backward, so at most the units completed at one
  // model unit are in flight), then unbinds and start()s those of every
  // unit complete at `m` (UnitShardLayout::completed_at) into its piece of
  // `grad_shard` (this rank's gradient shard buffer); the backward's last
  // model unit (0) waits for all. Collective; throws the backend's error.
  void reduce_completed(SlotPointers& ptrs, std::span<float> grad_shard, int32_t m, bool blocking) {
    finish_all();
    for (const int32_t o : shards_.completed_at(m)) {
      shards_.bind(ptrs, o, nullptr);
      start(o, shards_.piece(grad_shard, o), blocking);
    }
    if (m == 0) finish_all();
  }
  // Whether a reduce-scatter of `owner` is in flight.
  [[nodiscard]] bool pending(int32_t owner) const {
    const Slot& s = slot(owner);
    // A started reduce-scatter stays pending until its piece is added, also
    // when the backend finished it before returning (no work handle).
    return !s.piece.empty() || (s.bucket && s.bucket->pending());
  }
  // Reduce-scatters posted on `comm` since construction (none with one rank).
  [[nodiscard]] int64_t reduce_scatters() const noexcept { return reduce_scatters_; }
  // Waits for every reduce-scatter in flight, ignoring its error, and frees
  // every temporary buffer (the error path).
  void abandon() noexcept {
    for (Slot& s : slots_) {
      s.op = PendingOp();  // waits for an operation in flight, ignoring its error
      if (s.bucket) s.bucket->abandon();
      free_buffers(s);
    }
  }

 private:
  struct Slot {
    TrackedBuffer<float> full;      // the unit's full f32 gradients
    TrackedBuffer<uint8_t> wire;    // full gradients encoded (summable codec)
    TrackedBuffer<float> recv;      // this rank's summed piece, f32 wire
    TrackedBuffer<uint8_t> recv16;  // this rank's summed piece, encoded
    PendingOp op;                   // destroyed (waited) before the buffers
    std::span<float> piece;         // where the result is added
    // The codec's state for the unit (error feedback, scales), made on
    // first use; a gather or collective codec reduces through `bucket`.
    std::unique_ptr<CompressorBucket> state;
    std::optional<BucketCodec> bucket;
  };
  static tessera_dtype check_wire(tessera_dtype wire) {
    TESSERA_CHECK(wire == TESSERA_F32 || wire == TESSERA_BF16 || wire == TESSERA_F16,
                  TESSERA_ERR_INVALID_ARGUMENT, "unit reduce: gradient wire dtype ",
                  ::tessera::dtype_name(wire), " is not f32, bf16 or f16");
    return wire;
  }
  // The unit's full gradient buffer as a compressor bucket: its tensors,
  // then the padding as a vector.
  [[nodiscard]] CompressBucket describe(int32_t owner) const {
    const UnitShard& u = shards_.unit(owner);
    CompressBucket b = describe_bucket(shards_.flat(), u.unit, owner, comm_.size(), comm_.rank());
    const uint64_t total = u.shard.padded_total;
    if (total > b.elements) {
      b.tensors.push_back(CompressTensor{b.elements, 1, static_cast<int64_t>(total - b.elements)});
      b.elements = total;
    }
    return b;
  }
  // The slot's codec state, made on first use (nullptr: f32).
  CompressorBucket* state_of(int32_t owner, Slot& s) {
    if (!codec_.active() || fallback()) return nullptr;
    if (!s.state) s.state = codec_.bucket(describe(owner));
    return s.state.get();
  }
  [[nodiscard]] bool fallback() const noexcept {
    return codec_.active() && codec_.kind() != CompressKind::kSummable;
  }
  Slot& slot(int32_t owner) {
    TESSERA_CHECK(owner >= 0 && static_cast<size_t>(owner) < slots_.size(),
                  TESSERA_ERR_INVALID_ARGUMENT, "unit reduce: unit ", owner, " out of range (",
                  slots_.size(), " units)");
    return slots_[static_cast<size_t>(owner)];
  }
  [[nodiscard]] const Slot& slot(int32_t owner) const {
    return const_cast<UnitReducer*>(this)->slot(owner);  // NOLINT
  }
  [[nodiscard]] bool has_replicas() const noexcept {
    return replicas_ != nullptr && replicas_->size() > 1;
  }
  // Sums the received piece of `s` over the replicas, decodes it, adds it
  // into its target and frees its buffers (also when the allreduce throws).
  void accumulate(Slot& s);
  // state.encode(full, out), its time counted on comm_.
  void encode(CompressorBucket& state, std::span<const float> full, void* out);
  static void free_buffers(Slot& s) noexcept {
    s.full.release();
    s.wire.release();
    s.recv.release();
    s.recv16.release();
    s.piece = {};
  }

  Host host_;
  CommView& comm_;
  const UnitShardLayout& shards_;
  GradCodec codec_;
  tessera_dtype wire_;  // codec_.wire_dtype()
  int32_t memory_rank_;
  CommView* replicas_;
  std::vector<Slot> slots_;
  int64_t reduce_scatters_ = 0;
};

// Definitions (header-only).
inline UnitReducer::UnitReducer(const Host& host, CommView& comm, const UnitShardLayout& shards,
                                const GradCodec& codec, int32_t memory_rank, CommView* replicas,
                                const char* who, bool allreduce_fallback)
    : host_(host),
      comm_(comm),
      shards_(shards),
      codec_(codec),
      wire_(codec.wire_dtype()),
      memory_rank_(memory_rank >= 0 ? memory_rank : shards.rank()),
      replicas_(replicas) {
  if (fallback()) {
    if (!allreduce_fallback) codec.require_summable(who);
    TESSERA_CHECK(replicas == nullptr, TESSERA_ERR_INVALID_ARGUMENT, "strategy '", who,
                  "': compressor '", codec.name(),
                  "' is not summable and cannot also be reduced over replicas");
  }
  slots_.resize(static_cast<size_t>(shards.num_units()));
  for (Slot& s : slots_) {
    s.full = TrackedBuffer<float>(host, memory_rank_, TESSERA_MEM_COMM);
    s.wire = TrackedBuffer<uint8_t>(host, memory_rank_, TESSERA_MEM_COMM);
    s.recv = TrackedBuffer<float>(host, memory_rank_, TESSERA_MEM_COMM);
    s.recv16 = TrackedBuffer<uint8_t>(host, memory_rank_, TESSERA_MEM_COMM);
  }
}

inline float* UnitReducer::grads(int32_t owner) {
  if (pending(owner)) finish(owner);
  Slot& s = slot(owner);
  if (s.full.empty()) s.full.resize(static_cast<size_t>(shards_.gathered_elements(owner)));
  return s.full.data();
}

inline void UnitReducer::start(int32_t owner, std::span<float> piece, bool blocking) {
  Slot& s = slot(owner);
  const uint64_t piece_size = shards_.unit(owner).shard.shard_size;
  TESSERA_CHECK(piece.size() == piece_size, TESSERA_ERR_INTERNAL, "unit reduce: unit ", owner,
                " gradient piece of ", piece.size(), " elements, expected ", piece_size);
  TESSERA_CHECK(!pending(owner), TESSERA_ERR_INTERNAL, "unit reduce: unit ", owner,
                " has a gradient reduce-scatter in flight already");
  if (piece_size == 0) return;  // the unit owns no parameters
  s.piece = piece;
  const auto pieces = static_cast<size_t>(piece_size);
  const size_t total = pieces * static_cast<size_t>(comm_.size());
  if (s.full.empty()) s.full.resize(total);  // no contribution: zeros
  if (comm_.size() == 1 && !has_replicas()) {
    // The rank's piece is the whole unit: nothing to sum over or convert.
    for (size_t i = 0; i < pieces; ++i) piece[i] += s.full[i];
    free_buffers(s);
    return;
  }
  try {
    if (fallback()) {
      // A gather or collective compressor: the unit's buffer is allreduced
      // through it and this rank's block kept (comm_.size() > 1 here).
      if (!s.bucket) s.bucket.emplace(host_, memory_rank_, codec_, describe(owner));
      s.recv.resize(pieces);
      s.bucket->start_reduce_scatter(comm_, s.full.span(), s.recv.span());
      ++reduce_scatters_;
      if (blocking) finish(owner);
      return;
    }
    CompressorBucket* state = state_of(owner, s);
    const size_t el = tessera_dtype_size(wire_);
    if (comm_.size() == 1) {
      // Nothing to scatter: the whole unit is the received piece, summed
      // over the replicas in the wire dtype by accumulate().
      if (state == nullptr) {
        s.recv = std::move(s.full);
      } else {
        s.recv16.resize(pieces * el);
        encode(*state, s.full.span(), s.recv16.data());
        s.full.release();
      }
      accumulate(s);
      return;
    }
    if (state == nullptr) {
      s.recv.resize(pieces);
      s.op = comm_.start(CommView::args(TESSERA_COLL_REDUCE_SCATTER,
                                        wire_buffer(s.full.data(), total, TESSERA_F32),
                                        wire_buffer(s.recv.data(), pieces, TESSERA_F32)));
    } else {
      s.wire.resize(total * el);
      encode(*state, s.full.span(), s.wire.data());
      s.full.release();  // only the encoded copy travels
      s.recv16.resize(pieces * el);
      const tessera_coll_args args =
          CommView::args(TESSERA_COLL_REDUCE_SCATTER, wire_buffer(s.wire.data(), total, wire_),
                         wire_buffer(s.recv16.data(), pieces, wire_));
      comm_.count_compression(codec_detail::f32_volume(comm_, TESSERA_COLL_REDUCE_SCATTER, total) -
                                  comm_.bytes_sent(args),
                              0);
      s.op = comm_.start(args);
    }
    ++reduce_scatters_;
  } catch (...) {
    free_buffers(s);
    throw;
  }
  if (blocking) finish(owner);
}

inline void UnitReducer::finish(int32_t owner) {
  Slot& s = slot(owner);
  if (s.bucket && s.bucket->pending()) {
    try {
      s.bucket->finish();
    } catch (...) {
      free_buffers(s);
      throw;
    }
    accumulate(s);
    return;
  }
  // Nothing started, or already accumulated. An operation the backend
  // finished before returning (no work handle) still has to be accumulated.
  if (s.piece.empty()) return;
  try {
    s.op.wait(host_);
  } catch (...) {
    free_buffers(s);
    throw;
  }
  accumulate(s);
}

inline void UnitReducer::encode(CompressorBucket& state, std::span<const float> full, void* out) {
  const auto t0 = std::chrono::steady_clock::now();
  state.encode(full, out);
  comm_.count_compression(0, codec_detail::elapsed_ns(t0));
}

inline void UnitReducer::accumulate(Slot& s) {
  // The piece arrived in f32 (recv) unless the slot encodes (recv16).
  const bool wide = s.state == nullptr;
  if (has_replicas()) {
    // The 16-bit piece is summed as it arrived: no widening and rounding
    // back between the two reductions.
    try {
      const size_t n = s.piece.size();
      const tessera_buffer b = wide ? wire_buffer(s.recv.data(), n, TESSERA_F32)
                                    : wire_buffer(s.recv16.data(), n, wire_);
      replicas_->run(CommView::args(TESSERA_COLL_ALLREDUCE, b, b));
    } catch (...) {
      free_buffers(s);
      throw;
    }
  }
  if (!wide) {
    s.recv.resize(s.piece.size());
    const auto t0 = std::chrono::steady_clock::now();
    // This rank's piece is block comm_.rank() of the unit's buffer (the
    // whole buffer with one rank).
    const uint64_t offset =
        comm_.size() == 1 ? 0 : static_cast<uint64_t>(comm_.rank()) * s.piece.size();
    s.state->decode(s.recv16.data(), 1, offset, s.recv.span());
    comm_.count_compression(0, codec_detail::elapsed_ns(t0));
  }
  const float* in = s.recv.data();
  for (size_t i = 0; i < s.piece.size(); ++i) s.piece[i] += in[i];
  free_buffers(s);
}

}  // namespace tessera::sdk

// Per-unit gradient reduction of the strategies that shard gradients by
// unit (sdk::UnitShardLayout: ZeRO stage 2 and 3, FSDP): during backward a
// unit's gradients go to a temporary full-size buffer (the unit's backward,
// and the backward of every unit tied to its parameters, add into it);
// once they are complete the buffer is reduce-scattered (SUM) over the
// ranks and this rank's piece of the sum is ADDED into the caller's
// gradient shard (zero the piece at the start of a step to store instead).
// The reduce-scatter can run non-blocking while the backward goes on, and
// the wire can be bf16/f16 (f32 master gradients, only the bytes sent
// shrink). Every temporary buffer is tracked as TESSERA_MEM_COMM and lives
// only from the unit's first use in a backward pass until its
// reduce-scatter has been waited for.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/c/common.h"
#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_shards.hpp"

namespace tessera::sdk {

// Full gradient buffers and their reduce-scatters, one slot per owning
// unit. Not thread-safe; one per rank. `comm` and `shards` must outlive it.
// Every rank posts the same collectives in the same order as long as the
// callers' sequence of calls depends on the model only. The destructor
// waits for reduce-scatters still in flight, ignoring errors.
class UnitReducer {
 public:
  // `wire` is the dtype of the gradients on the wire: TESSERA_F32,
  // TESSERA_BF16 or TESSERA_F16 (anything else: tessera::Error, invalid
  // argument, naming the dtype). `memory_rank` is the world rank the
  // buffers are reported for (-1: shards.rank(), right when `comm` is the
  // world).
  UnitReducer(const Host& host, CommView& comm, const UnitShardLayout& shards, tessera_dtype wire,
              int32_t memory_rank = -1);
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
  // which must stay valid until finish()). With `blocking` (or one rank)
  // the result is added before returning. A unit owning no parameter posts
  // nothing. Throws the backend's error (the unit's buffers are freed).
  void start(int32_t owner, std::span<float> piece, bool blocking);
  // Waits for `owner`'s reduce-scatter if one is in flight, adds the result
  // into its piece (converted to f32) and frees the unit's temporary
  // buffers. Throws the backend's error (the buffers are freed anyway).
  void finish(int32_t owner);
  // finish() for every unit with a reduce-scatter in flight, in unit order.
  void finish_all() {
    for (int32_t o = 0; o < shards_.num_units(); ++o) finish(o);
  }
  // Whether a reduce-scatter of `owner` is in flight.
  [[nodiscard]] bool pending(int32_t owner) const { return slot(owner).op.pending(); }
  // Waits for every reduce-scatter in flight, ignoring its error, and frees
  // every temporary buffer (the error path).
  void abandon() noexcept {
    for (Slot& s : slots_) {
      s.op = PendingOp();  // waits for an operation in flight, ignoring its error
      free_buffers(s);
    }
  }

 private:
  struct Slot {
    TrackedBuffer<float> full;       // the unit's full f32 gradients
    TrackedBuffer<uint16_t> wire;    // full gradients packed to 16 bits
    TrackedBuffer<float> recv;       // this rank's summed piece, f32 wire
    TrackedBuffer<uint16_t> recv16;  // this rank's summed piece, 16-bit wire
    PendingOp op;                    // destroyed (waited) before the buffers
    std::span<float> piece;          // where the result is added
  };
  Slot& slot(int32_t owner) {
    TESSERA_CHECK(owner >= 0 && static_cast<size_t>(owner) < slots_.size(),
                  TESSERA_ERR_INVALID_ARGUMENT, "unit reduce: unit ", owner, " out of range (",
                  slots_.size(), " units)");
    return slots_[static_cast<size_t>(owner)];
  }
  [[nodiscard]] const Slot& slot(int32_t owner) const {
    return const_cast<UnitReducer*>(this)->slot(owner);  // NOLINT
  }
  // Adds the received piece of `s` into its target and frees its buffers.
  void accumulate(Slot& s);
  static void free_buffers(Slot& s) noexcept {
    s.full.release();
    s.wire.release();
    s.recv.release();
    s.recv16.release();
    s.piece = {};
  }
  // A CPU buffer of `count` elements of `dtype` at `data`.
  static tessera_buffer cpu_buffer(void* data, size_t count, tessera_dtype dtype) {
    return tessera_buffer{data, count, dtype, tessera_device{TESSERA_DEVICE_CPU, 0}};
  }

  Host host_;
  CommView& comm_;
  const UnitShardLayout& shards_;
  tessera_dtype wire_;
  std::vector<Slot> slots_;
};

// Definitions (header-only).
inline UnitReducer::UnitReducer(const Host& host, CommView& comm, const UnitShardLayout& shards,
                                tessera_dtype wire, int32_t memory_rank)
    : host_(host), comm_(comm), shards_(shards), wire_(wire) {
  TESSERA_CHECK(wire == TESSERA_F32 || wire == TESSERA_BF16 || wire == TESSERA_F16,
                TESSERA_ERR_INVALID_ARGUMENT, "unit reduce: gradient wire dtype ",
                ::tessera::dtype_name(wire), " is not f32, bf16 or f16");
  slots_.resize(static_cast<size_t>(shards.num_units()));
  const int32_t rank = memory_rank >= 0 ? memory_rank : shards.rank();
  for (Slot& s : slots_) {
    s.full = TrackedBuffer<float>(host, rank, TESSERA_MEM_COMM);
    s.wire = TrackedBuffer<uint16_t>(host, rank, TESSERA_MEM_COMM);
    s.recv = TrackedBuffer<float>(host, rank, TESSERA_MEM_COMM);
    s.recv16 = TrackedBuffer<uint16_t>(host, rank, TESSERA_MEM_COMM);
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
  TESSERA_CHECK(!s.op.pending(), TESSERA_ERR_INTERNAL, "unit reduce: unit ", owner,
                " has a gradient reduce-scatter in flight already");
  if (piece_size == 0) return;  // the unit owns no parameters
  s.piece = piece;
  const auto pieces = static_cast<size_t>(piece_size);
  const size_t total = pieces * static_cast<size_t>(comm_.size());
  if (s.full.empty()) s.full.resize(total);  // no contribution: zeros
  if (comm_.size() == 1) {
    // The rank's piece is the whole unit: nothing to sum over or convert.
    for (size_t i = 0; i < pieces; ++i) piece[i] += s.full[i];
    free_buffers(s);
    return;
  }
  try {
    if (wire_ == TESSERA_F32) {
      s.recv.resize(pieces);
      s.op = comm_.start(CommView::args(TESSERA_COLL_REDUCE_SCATTER,
                                        cpu_buffer(s.full.data(), total, TESSERA_F32),
                                        cpu_buffer(s.recv.data(), pieces, TESSERA_F32)));
    } else {
      s.wire.resize(total);
      pack_16bit(s.full.span(), wire_, s.wire.data());
      s.full.release();  // only the packed copy travels
      s.recv16.resize(pieces);
      s.op = comm_.start(CommView::args(TESSERA_COLL_REDUCE_SCATTER,
                                        cpu_buffer(s.wire.data(), total, wire_),
                                        cpu_buffer(s.recv16.data(), pieces, wire_)));
    }
  } catch (...) {
    free_buffers(s);
    throw;
  }
  if (blocking) finish(owner);
}

inline void UnitReducer::finish(int32_t owner) {
  Slot& s = slot(owner);
  if (!s.op.pending()) return;
  try {
    s.op.wait(host_);
  } catch (...) {
    free_buffers(s);
    throw;
  }
  accumulate(s);
}

inline void UnitReducer::accumulate(Slot& s) {
  if (wire_ != TESSERA_F32 && comm_.size() > 1) {
    s.recv.resize(s.piece.size());
    unpack_16bit(s.recv16.data(), wire_, s.recv.span());
  }
  const float* in = s.recv.data();
  for (size_t i = 0; i < s.piece.size(); ++i) s.piece[i] += in[i];
  free_buffers(s);
}

}  // namespace tessera::sdk

// The temporary full-size buffers of the per-unit sharded strategies
// (ZeRO stage 3, FSDP): one unit's gathered
// parameters (allgathered from every rank's piece of the unit, possibly
// started ahead of use) and one unit's full gradients (summed during
// backward, reduce-scattered into the owning ranks' gradient shards).
// Both are tracked as TESSERA_MEM_COMM and exist only while needed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/sdk/error.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_shards.hpp"

namespace tessera::sdk {

// Gathered parameter and full gradient buffers, one slot of each per unit
// (indexed by the owning unit). Not thread-safe; one per rank. `comm` and
// `shards` must outlive it. Every collective it posts is posted in the same
// order by every rank as long as the callers' sequence of calls is the same
// on every rank (it is: it depends on the model only). The destructor
// waits for any allgather still in flight.
class UnitGather {
 public:
  // `memory_rank` is the world rank the buffers are reported for (-1:
  // shards.rank(), right when `comm` is the world).
  UnitGather(const Host& host, CommView& comm, const UnitShardLayout& shards,
             int32_t memory_rank = -1);
  UnitGather(const UnitGather&) = delete;
  UnitGather& operator=(const UnitGather&) = delete;
  ~UnitGather() = default;

  // Starts the allgather of unit `owner`'s parameters from `piece` (this
  // rank's ceil(Ψ_u / N) elements, which must stay unchanged until the
  // gather is waited for) unless they are already gathered or in flight.
  // With one rank the piece is copied at once. Throws the backend's error.
  void start(int32_t owner, std::span<const float> piece);
  // Makes unit `owner`'s gathered parameters available (starting the
  // gather first if needed) and returns them: gathered_elements(owner)
  // values, the unit's parameters in flat order then padding. Throws the
  // backend's error for a failed allgather.
  float* ready(int32_t owner, std::span<const float> piece);
  // Whether `owner`'s parameters are gathered or being gathered.
  [[nodiscard]] bool held(int32_t owner) const;
  // Waits for an allgather in flight (errors propagate) and frees the
  // gathered parameters of `owner`; nothing if none are held.
  void release(int32_t owner);
  // Frees every gathered parameter buffer and gradient buffer; waits for
  // allgathers in flight and swallows their errors (the error path).
  void release_all() noexcept;

  // Unit `owner`'s full gradient buffer (gathered_elements(owner) values),
  // allocated zeroed on first use and kept until reduce_scatter().
  float* grads(int32_t owner);
  // Whether `owner` has a full gradient buffer.
  [[nodiscard]] bool has_grads(int32_t owner) const;
  // Collective. Sums unit `owner`'s full gradient buffer over the ranks and
  // stores this rank's piece into `piece` (ceil(Ψ_u / N) elements), then
  // frees the buffer. A unit without a buffer contributes zeros. Throws the
  // backend's error.
  void reduce_scatter(int32_t owner, std::span<float> piece);

 private:
  struct Slot {
    TrackedBuffer<float> params;
    PendingOp gather;  // declared after params: destroyed (waited) first
    TrackedBuffer<float> grads;
  };
  Slot& slot(int32_t owner);
  [[nodiscard]] const Slot& slot(int32_t owner) const;

  Host host_;
  CommView& comm_;
  const UnitShardLayout& shards_;
  int32_t rank_;
  std::vector<Slot> slots_;
};

// Definitions (header-only).
inline UnitGather::UnitGather(const Host& host, CommView& comm, const UnitShardLayout& shards,
                              int32_t memory_rank)
    : host_(host),
      comm_(comm),
      shards_(shards),
      rank_(memory_rank >= 0 ? memory_rank : shards.rank()) {
  slots_.resize(static_cast<size_t>(shards.num_units()));
  for (Slot& s : slots_) {
    s.params = TrackedBuffer<float>(host, rank_, TESSERA_MEM_COMM);
    s.grads = TrackedBuffer<float>(host, rank_, TESSERA_MEM_COMM);
  }
}

inline UnitGather::Slot& UnitGather::slot(int32_t owner) {
  TESSERA_CHECK(owner >= 0 && static_cast<size_t>(owner) < slots_.size(),
                TESSERA_ERR_INVALID_ARGUMENT, "unit gather: unit ", owner, " out of range (",
                slots_.size(), " units)");
  return slots_[static_cast<size_t>(owner)];
}

inline const UnitGather::Slot& UnitGather::slot(int32_t owner) const {
  return const_cast<UnitGather*>(this)->slot(owner);  // NOLINT
}

inline void UnitGather::start(int32_t owner, std::span<const float> piece) {
  Slot& s = slot(owner);
  if (!s.params.empty()) return;
  const uint64_t piece_size = shards_.unit(owner).shard.shard_size;
  TESSERA_CHECK(piece.size() == piece_size, TESSERA_ERR_INTERNAL, "unit gather: unit ", owner,
                " piece of ", piece.size(), " elements, expected ", piece_size);
  if (piece_size == 0) return;  // the unit owns no parameters
  s.params.resize(static_cast<size_t>(shards_.gathered_elements(owner)));
  if (comm_.size() == 1) {
    std::copy(piece.begin(), piece.end(), s.params.data());
    return;
  }
  s.gather = comm_.start_allgather(piece, s.params.span());
}

inline float* UnitGather::ready(int32_t owner, std::span<const float> piece) {
  start(owner, piece);
  Slot& s = slot(owner);
  if (s.gather.pending()) s.gather.wait(host_);
  return s.params.data();
}

inline bool UnitGather::held(int32_t owner) const { return !slot(owner).params.empty(); }

inline void UnitGather::release(int32_t owner) {
  Slot& s = slot(owner);
  if (s.gather.pending()) s.gather.wait(host_);
  s.params.release();
}

inline void UnitGather::release_all() noexcept {
  for (Slot& s : slots_) {
    s.gather = PendingOp();  // waits for an operation in flight, ignoring its error
    s.params.release();
    s.grads.release();
  }
}

inline float* UnitGather::grads(int32_t owner) {
  Slot& s = slot(owner);
  if (s.grads.empty()) s.grads.resize(static_cast<size_t>(shards_.gathered_elements(owner)));
  return s.grads.data();
}

inline bool UnitGather::has_grads(int32_t owner) const { return !slot(owner).grads.empty(); }

inline void UnitGather::reduce_scatter(int32_t owner, std::span<float> piece) {
  Slot& s = slot(owner);
  const uint64_t piece_size = shards_.unit(owner).shard.shard_size;
  TESSERA_CHECK(piece.size() == piece_size, TESSERA_ERR_INTERNAL, "unit gather: unit ", owner,
                " gradient piece of ", piece.size(), " elements, expected ", piece_size);
  if (piece_size == 0) return;
  float* full = grads(owner);
  if (comm_.size() == 1) {
    std::copy(full, full + piece_size, piece.begin());
  } else {
    comm_.reduce_scatter(std::span<const float>(full, static_cast<size_t>(piece_size) *
                                                          static_cast<size_t>(comm_.size())),
                         piece);
  }
  s.grads.release();
}

}  // namespace tessera::sdk

// The gathered parameters of the per-unit sharded strategies (ZeRO stage 3,
// FSDP): one unit's full parameters, allgathered from every rank's piece of
// the unit (possibly started ahead of use), tracked as TESSERA_MEM_COMM and
// alive only while needed. The allgather may travel in a 16-bit dtype
// (bf16, f16): the f32 piece is rounded into a 16-bit staging copy for the
// wire and the gathered values widened back to f32 on arrival, so only the
// bytes sent shrink. The gradient half (full gradient buffers and their
// reduce-scatters) is sdk::UnitReducer, in unit_reduce.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_shards.hpp"

namespace tessera::sdk {

// Gathered parameter buffers, one slot per unit (indexed by the owning
// unit). Not thread-safe; one per rank. `comm` and
// `shards` must outlive it. Every collective it posts is posted in the same
// order by every rank as long as the callers' sequence of calls is the same
// on every rank (it is: it depends on the model only). The destructor
// waits for any allgather still in flight.
class UnitGather {
 public:
  // `memory_rank` is the world rank the buffers are reported for (-1:
  // shards.rank(), right when `comm` is the world). `param_dtype` is the
  // dtype of the parameter allgathers (F32, BF16 or F16; with one rank
  // nothing is sent and values are copied in f32). Throws tessera::Error
  // (invalid argument) for any other dtype.
  UnitGather(const Host& host, CommView& comm, const UnitShardLayout& shards,
             int32_t memory_rank = -1, tessera_dtype param_dtype = TESSERA_F32);
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
  // f32 values, the unit's parameters in flat order then padding (rounded
  // through param_dtype when that is 16-bit). Throws the backend's error
  // for a failed allgather.
  float* ready(int32_t owner, std::span<const float> piece);
  // Whether `owner`'s parameters are gathered or being gathered.
  [[nodiscard]] bool held(int32_t owner) const;
  // Waits for an allgather in flight (errors propagate) and frees the
  // gathered parameters of `owner`; nothing if none are held.
  void release(int32_t owner);
  // Frees every gathered parameter buffer; waits for allgathers in flight
  // and swallows their errors (the error path).
  void release_all() noexcept;

  // The per-unit schedule of ZeRO-3 and FSDP around model unit `m`'s
  // forward or backward, over this rank's parameter shard buffer `shard`
  // (shards.shard_elements() elements) and the parameter slot pointers
  // `ptrs`: when `free_others`, releases (and unbinds) every held unit that
  // neither `m` nor model unit `next` uses (next < 0: none); gathers the
  // units `m` uses and binds their slots; when `prefetch`, starts the
  // gathers of the units `next` uses. Throws the backend's error.
  void use(SlotPointers& ptrs, std::span<const float> shard, int32_t m, int32_t next, bool prefetch,
           bool free_others = true);
  // Unbinds unit `owner`'s slots in `ptrs`, then release(owner).
  void release(SlotPointers& ptrs, int32_t owner) {
    shards_.bind(ptrs, owner, nullptr);
    release(owner);
  }

  // Allgathers posted since construction (none with one rank).
  [[nodiscard]] int64_t allgathers() const noexcept { return allgathers_; }

 private:
  struct Slot {
    TrackedBuffer<float> params;
    TrackedBuffer<uint16_t> send16;  // 16-bit params: this rank's piece
    TrackedBuffer<uint16_t> recv16;  // 16-bit params: the gathered unit
    PendingOp gather;                // declared after its buffers: destroyed (waited) first
  };
  // Waits for `s`'s allgather if one is in flight; on its error frees the
  // slot and rethrows.
  void wait(Slot& s);
  // wait(s), then widens a 16-bit gathered copy into s.params.
  void complete(Slot& s);
  static void free_params(Slot& s) noexcept;
  Slot& slot(int32_t owner);
  [[nodiscard]] const Slot& slot(int32_t owner) const;

  Host host_;
  CommView& comm_;
  const UnitShardLayout& shards_;
  int32_t rank_;
  tessera_dtype param_dtype_;
  std::vector<Slot> slots_;
  int64_t allgathers_ = 0;
};

// Definitions (header-only).
inline UnitGather::UnitGather(const Host& host, CommView& comm, const UnitShardLayout& shards,
                              int32_t memory_rank, tessera_dtype param_dtype)
    : host_(host),
      comm_(comm),
      shards_(shards),
      rank_(memory_rank >= 0 ? memory_rank : shards.rank()),
      param_dtype_(param_dtype) {
  TESSERA_CHECK(
      param_dtype == TESSERA_F32 || param_dtype == TESSERA_BF16 || param_dtype == TESSERA_F16,
      TESSERA_ERR_INVALID_ARGUMENT, "unit gather: parameter dtype ", dtype_name(param_dtype),
      " is not f32, bf16 or f16");
  slots_.resize(static_cast<size_t>(shards.num_units()));
  for (Slot& s : slots_) {
    s.params = TrackedBuffer<float>(host, rank_, TESSERA_MEM_COMM);
    s.send16 = TrackedBuffer<uint16_t>(host, rank_, TESSERA_MEM_COMM);
    s.recv16 = TrackedBuffer<uint16_t>(host, rank_, TESSERA_MEM_COMM);
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

inline void UnitGather::free_params(Slot& s) noexcept {
  s.gather = PendingOp();  // waits for an operation in flight, ignoring its error
  s.params.release();
  s.send16.release();
  s.recv16.release();
}

inline void UnitGather::start(int32_t owner, std::span<const float> piece) {
  Slot& s = slot(owner);
  if (!s.params.empty()) return;
  const uint64_t piece_size = shards_.unit(owner).shard.shard_size;
  TESSERA_CHECK(piece.size() == piece_size, TESSERA_ERR_INTERNAL, "unit gather: unit ", owner,
                " piece of ", piece.size(), " elements, expected ", piece_size);
  if (piece_size == 0) return;  // the unit owns no parameters
  const auto gathered = static_cast<size_t>(shards_.gathered_elements(owner));
  s.params.resize(gathered);
  if (comm_.size() == 1) {
    std::copy(piece.begin(), piece.end(), s.params.data());
    return;
  }
  ++allgathers_;
  try {
    if (param_dtype_ == TESSERA_F32) {
      s.gather = comm_.start_allgather(piece, s.params.span());
    } else {
      s.send16.resize(piece.size());
      pack_16bit(piece, param_dtype_, s.send16.data());
      s.recv16.resize(gathered);
      s.gather = comm_.start(CommView::args(
          TESSERA_COLL_ALLGATHER, wire_buffer(s.send16.data(), piece.size(), param_dtype_),
          wire_buffer(s.recv16.data(), gathered, param_dtype_)));
    }
  } catch (...) {
    free_params(s);
    throw;
  }
}

inline void UnitGather::wait(Slot& s) {
  if (!s.gather.pending()) return;
  try {
    s.gather.wait(host_);
  } catch (...) {
    free_params(s);
    throw;
  }
}

inline void UnitGather::complete(Slot& s) {
  wait(s);
  if (!s.recv16.empty()) {
    unpack_16bit(s.recv16.data(), param_dtype_, s.params.span());
    s.send16.release();
    s.recv16.release();
  }
}

inline float* UnitGather::ready(int32_t owner, std::span<const float> piece) {
  start(owner, piece);
  Slot& s = slot(owner);
  complete(s);
  return s.params.data();
}

inline bool UnitGather::held(int32_t owner) const { return !slot(owner).params.empty(); }

inline void UnitGather::release(int32_t owner) {
  Slot& s = slot(owner);
  wait(s);
  free_params(s);
}

inline void UnitGather::release_all() noexcept {
  for (Slot& s : slots_) free_params(s);
}

inline void UnitGather::use(SlotPointers& ptrs, std::span<const float> shard, int32_t m,
                            int32_t next, bool prefetch, bool free_others) {
  const std::vector<int32_t>& needed = shards_.owners(m);
  static const std::vector<int32_t> kNone;
  const std::vector<int32_t>& ahead = next >= 0 ? shards_.owners(next) : kNone;
  const auto in = [](const std::vector<int32_t>& v, int32_t o) {
    return std::find(v.begin(), v.end(), o) != v.end();
  };
  if (free_others) {
    for (int32_t o = 0; o < shards_.num_units(); ++o) {
      if (held(o) && !in(needed, o) && !in(ahead, o)) release(ptrs, o);
    }
  }
  for (const int32_t o : needed) shards_.bind(ptrs, o, ready(o, shards_.piece(shard, o)));
  if (!prefetch) return;
  for (const int32_t o : ahead) start(o, shards_.piece(shard, o));
}

}  // namespace tessera::sdk

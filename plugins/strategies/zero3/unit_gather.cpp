// Gathered parameter and full gradient buffers of `zero3` (see unit_gather.hpp).
#include "unit_gather.hpp"

#include <algorithm>

#include "tessera/sdk/error.hpp"

namespace tessera::strategies {

UnitGather::UnitGather(const sdk::Host& host, sdk::CommView& comm,
                       const sdk::UnitShardLayout& shards)
    : host_(host), comm_(comm), shards_(shards), rank_(shards.rank()) {
  slots_.resize(static_cast<size_t>(shards.num_units()));
  for (Slot& s : slots_) {
    s.params = sdk::TrackedBuffer<float>(host, rank_, TESSERA_MEM_COMM);
    s.grads = sdk::TrackedBuffer<float>(host, rank_, TESSERA_MEM_COMM);
  }
}

UnitGather::Slot& UnitGather::slot(int32_t owner) {
  TESSERA_CHECK(owner >= 0 && static_cast<size_t>(owner) < slots_.size(),
                TESSERA_ERR_INVALID_ARGUMENT, "zero3: unit ", owner, " out of range (",
                slots_.size(), " units)");
  return slots_[static_cast<size_t>(owner)];
}

const UnitGather::Slot& UnitGather::slot(int32_t owner) const {
  return const_cast<UnitGather*>(this)->slot(owner);  // NOLINT
}

void UnitGather::start(int32_t owner, std::span<const float> piece) {
  Slot& s = slot(owner);
  if (!s.params.empty()) return;
  const uint64_t piece_size = shards_.unit(owner).shard.shard_size;
  TESSERA_CHECK(piece.size() == piece_size, TESSERA_ERR_INTERNAL, "zero3: unit ", owner,
                " piece of ", piece.size(), " elements, expected ", piece_size);
  if (piece_size == 0) return;  // the unit owns no parameters
  s.params.resize(static_cast<size_t>(shards_.gathered_elements(owner)));
  if (comm_.size() == 1) {
    std::copy(piece.begin(), piece.end(), s.params.data());
    return;
  }
  s.gather = comm_.start_allgather(piece, s.params.span());
}

float* UnitGather::ready(int32_t owner, std::span<const float> piece) {
  start(owner, piece);
  Slot& s = slot(owner);
  if (s.gather.pending()) s.gather.wait(host_);
  return s.params.data();
}

bool UnitGather::held(int32_t owner) const { return !slot(owner).params.empty(); }

void UnitGather::release(int32_t owner) {
  Slot& s = slot(owner);
  if (s.gather.pending()) s.gather.wait(host_);
  s.params.release();
}

void UnitGather::release_all() noexcept {
  for (Slot& s : slots_) {
    s.gather = sdk::PendingOp();  // waits for an operation in flight, ignoring its error
    s.params.release();
    s.grads.release();
  }
}

float* UnitGather::grads(int32_t owner) {
  Slot& s = slot(owner);
  if (s.grads.empty()) s.grads.resize(static_cast<size_t>(shards_.gathered_elements(owner)));
  return s.grads.data();
}

bool UnitGather::has_grads(int32_t owner) const { return !slot(owner).grads.empty(); }

void UnitGather::reduce_scatter(int32_t owner, std::span<float> piece) {
  Slot& s = slot(owner);
  const uint64_t piece_size = shards_.unit(owner).shard.shard_size;
  TESSERA_CHECK(piece.size() == piece_size, TESSERA_ERR_INTERNAL, "zero3: unit ", owner,
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

}  // namespace tessera::strategies

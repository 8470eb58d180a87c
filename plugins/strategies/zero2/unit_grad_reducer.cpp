// The per-unit gradient reduce-scatter of `zero2` (see unit_grad_reducer.hpp).
#include "unit_grad_reducer.hpp"

#include <algorithm>

#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::strategies {

namespace {
// A CPU buffer of `count` elements of `dtype` at `data`.
tessera_buffer cpu_buffer(void* data, size_t count, tessera_dtype dtype) {
  return tessera_buffer{data, count, dtype, tessera_device{TESSERA_DEVICE_CPU, 0}};
}
}  // namespace

UnitGradReducer::UnitGradReducer(const sdk::Host& host, sdk::CommView& comm,
                                 const sdk::UnitShardLayout& shards, tessera_dtype wire)
    : host_(host), comm_(comm), shards_(shards), wire_(wire) {
  TESSERA_CHECK(wire == TESSERA_F32 || wire == TESSERA_BF16 || wire == TESSERA_F16,
                TESSERA_ERR_INVALID_ARGUMENT, "zero2: gradient wire dtype ",
                ::tessera::dtype_name(wire), " is not f32, bf16 or f16");
  slots_.resize(static_cast<size_t>(shards.num_units()));
  const int32_t rank = shards.rank();
  for (Slot& s : slots_) {
    s.full = sdk::TrackedBuffer<float>(host, rank, TESSERA_MEM_COMM);
    s.wire = sdk::TrackedBuffer<uint16_t>(host, rank, TESSERA_MEM_COMM);
    s.recv = sdk::TrackedBuffer<float>(host, rank, TESSERA_MEM_COMM);
    s.recv16 = sdk::TrackedBuffer<uint16_t>(host, rank, TESSERA_MEM_COMM);
  }
}

UnitGradReducer::Slot& UnitGradReducer::slot(int32_t owner) {
  TESSERA_CHECK(owner >= 0 && static_cast<size_t>(owner) < slots_.size(),
                TESSERA_ERR_INVALID_ARGUMENT, "zero2: unit ", owner, " out of range (",
                slots_.size(), " units)");
  return slots_[static_cast<size_t>(owner)];
}

const UnitGradReducer::Slot& UnitGradReducer::slot(int32_t owner) const {
  return const_cast<UnitGradReducer*>(this)->slot(owner);  // NOLINT
}

bool UnitGradReducer::pending(int32_t owner) const { return slot(owner).op.pending(); }

float* UnitGradReducer::grads(int32_t owner) {
  if (pending(owner)) finish(owner);
  Slot& s = slot(owner);
  if (s.full.empty()) s.full.resize(static_cast<size_t>(shards_.gathered_elements(owner)));
  return s.full.data();
}

void UnitGradReducer::start(int32_t owner, std::span<float> piece, bool blocking) {
  Slot& s = slot(owner);
  const uint64_t piece_size = shards_.unit(owner).shard.shard_size;
  TESSERA_CHECK(piece.size() == piece_size, TESSERA_ERR_INTERNAL, "zero2: unit ", owner,
                " gradient piece of ", piece.size(), " elements, expected ", piece_size);
  TESSERA_CHECK(!s.op.pending(), TESSERA_ERR_INTERNAL, "zero2: unit ", owner,
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
      s.op = comm_.start(sdk::CommView::args(TESSERA_COLL_REDUCE_SCATTER,
                                             cpu_buffer(s.full.data(), total, TESSERA_F32),
                                             cpu_buffer(s.recv.data(), pieces, TESSERA_F32)));
    } else {
      s.wire.resize(total);
      sdk::pack_16bit(s.full.span(), wire_, s.wire.data());
      s.full.release();  // only the packed copy travels
      s.recv16.resize(pieces);
      s.op = comm_.start(sdk::CommView::args(TESSERA_COLL_REDUCE_SCATTER,
                                             cpu_buffer(s.wire.data(), total, wire_),
                                             cpu_buffer(s.recv16.data(), pieces, wire_)));
    }
  } catch (...) {
    free_buffers(s);
    throw;
  }
  if (blocking) finish(owner);
}

void UnitGradReducer::finish(int32_t owner) {
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

void UnitGradReducer::finish_all() {
  for (int32_t o = 0; o < shards_.num_units(); ++o) finish(o);
}

void UnitGradReducer::accumulate(Slot& s) {
  if (wire_ != TESSERA_F32 && comm_.size() > 1) {
    s.recv.resize(s.piece.size());
    sdk::unpack_16bit(s.recv16.data(), wire_, s.recv.span());
  }
  const float* in = s.recv.data();
  for (size_t i = 0; i < s.piece.size(); ++i) s.piece[i] += in[i];
  free_buffers(s);
}

void UnitGradReducer::free_buffers(Slot& s) noexcept {
  s.full.release();
  s.wire.release();
  s.recv.release();
  s.recv16.release();
  s.piece = {};
}

void UnitGradReducer::abandon() noexcept {
  for (Slot& s : slots_) {
    s.op = sdk::PendingOp();  // waits for an operation in flight, ignoring its error
    free_buffers(s);
  }
}

}  // namespace tessera::strategies

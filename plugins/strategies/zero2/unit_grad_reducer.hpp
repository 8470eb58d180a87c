// The per-unit gradient path of the `zero2` strategy: a temporary full
// gradient buffer per unit (the unit's backward, and the backward of every
// unit tied to its parameters, add into it), reduce-scattered after the
// unit's gradients are complete for the micro-batch and ADDED into this
// rank's piece of the unit in the gradient shard. Every temporary buffer is
// tracked as TESSERA_MEM_COMM and lives only from the unit's first use in a
// backward pass until its reduce-scatter has been waited for.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/c/common.h"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_shards.hpp"

namespace tessera::strategies {

// Full gradient buffers and their reduce-scatters, one slot per owning
// unit. Not thread-safe; one per rank. `comm` and `shards` must outlive it.
// Every rank posts the same collectives in the same order as long as the
// callers' sequence of calls depends on the model only (it does). The
// destructor waits for reduce-scatters still in flight, ignoring errors.
class UnitGradReducer {
 public:
  // `wire` is the dtype of the gradients on the wire: TESSERA_F32,
  // TESSERA_BF16 or TESSERA_F16 (anything else: tessera::Error, invalid
  // argument, naming the dtype).
  UnitGradReducer(const sdk::Host& host, sdk::CommView& comm, const sdk::UnitShardLayout& shards,
                  tessera_dtype wire);
  UnitGradReducer(const UnitGradReducer&) = delete;
  UnitGradReducer& operator=(const UnitGradReducer&) = delete;
  ~UnitGradReducer() { abandon(); }

  // Unit `owner`'s full gradient buffer (gathered_elements(owner) values,
  // the unit's gradients in flat order then padding), allocated zeroed on
  // first use. If a reduce-scatter of `owner` is still in flight it is
  // completed first (finish()), so the buffer is never written while being
  // sent. Errors of that reduce-scatter propagate.
  float* grads(int32_t owner);
  // Collective. Starts the reduce-scatter (SUM) of `owner`'s full gradient
  // buffer (zeros if it has none); its result will be added into `piece`
  // (this rank's ceil(Ψ_u / N) elements of the unit in the gradient shard,
  // which must stay valid until finish()). With `blocking` (or one rank)
  // the result is added before returning. A unit owning no parameter posts
  // nothing. Throws the backend's error.
  void start(int32_t owner, std::span<float> piece, bool blocking);
  // Waits for `owner`'s reduce-scatter if one is in flight, adds the result
  // into its piece (converted to f32) and frees the unit's temporary
  // buffers. Throws the backend's error (the buffers are freed anyway).
  void finish(int32_t owner);
  // finish() for every unit with a reduce-scatter in flight, in unit order.
  void finish_all();
  // Whether a reduce-scatter of `owner` is in flight.
  [[nodiscard]] bool pending(int32_t owner) const;
  // Waits for every reduce-scatter in flight, ignoring its error, and frees
  // every temporary buffer (the error path).
  void abandon() noexcept;

 private:
  struct Slot {
    sdk::TrackedBuffer<float> full;       // the unit's full f32 gradients
    sdk::TrackedBuffer<uint16_t> wire;    // full gradients packed to 16 bits
    sdk::TrackedBuffer<float> recv;       // this rank's summed piece, f32 wire
    sdk::TrackedBuffer<uint16_t> recv16;  // this rank's summed piece, 16-bit wire
    sdk::PendingOp op;                    // destroyed (waited) before the buffers
    std::span<float> piece;               // where the result is added
  };
  Slot& slot(int32_t owner);
  [[nodiscard]] const Slot& slot(int32_t owner) const;
  // Adds the received piece of `s` into its target and frees its buffers.
  void accumulate(Slot& s);
  static void free_buffers(Slot& s) noexcept;

  sdk::Host host_;
  sdk::CommView& comm_;
  const sdk::UnitShardLayout& shards_;
  tessera_dtype wire_;
  std::vector<Slot> slots_;
};

}  // namespace tessera::strategies

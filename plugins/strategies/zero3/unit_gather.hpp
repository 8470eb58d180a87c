// The temporary full-size buffers of `zero3`: one unit's gathered
// parameters (allgathered from every rank's piece of the unit, possibly
// started ahead of use) and one unit's full gradients (summed during
// backward, reduce-scattered into the owning ranks' gradient shards).
// Both are tracked as TESSERA_MEM_COMM and exist only while needed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_shards.hpp"

namespace tessera::strategies {

// Gathered parameter and full gradient buffers, one slot of each per unit
// (indexed by the owning unit). Not thread-safe; one per rank. `comm` and
// `shards` must outlive it. Every collective it posts is posted in the same
// order by every rank as long as the callers' sequence of calls is the same
// on every rank (it is: it depends on the model only). The destructor
// waits for any allgather still in flight.
class UnitGather {
 public:
  UnitGather(const sdk::Host& host, sdk::CommView& comm, const sdk::UnitShardLayout& shards);
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
    sdk::TrackedBuffer<float> params;
    sdk::PendingOp gather;  // declared after params: destroyed (waited) first
    sdk::TrackedBuffer<float> grads;
  };
  Slot& slot(int32_t owner);
  [[nodiscard]] const Slot& slot(int32_t owner) const;

  sdk::Host host_;
  sdk::CommView& comm_;
  const sdk::UnitShardLayout& shards_;
  int32_t rank_;
  std::vector<Slot> slots_;
};

}  // namespace tessera::strategies

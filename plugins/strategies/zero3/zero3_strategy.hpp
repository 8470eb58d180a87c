// The `zero3` strategy: ZeRO stage 3. Parameters, gradients and optimizer
// state are all sharded over the N ranks, unit by unit
// (sdk::UnitShardLayout): each rank keeps ceil(Ψ_u / N) elements of every
// unit u's parameters, gradients and optimizer slots. Around each unit's
// forward and backward the unit's full parameters are allgathered into a
// temporary buffer (the next unit's gather is started ahead while the
// current one computes, unless prefetch = false) and freed as soon as the
// unit is done. On the last micro-batch, once a unit's gradients are
// complete, its full gradients are reduce-scattered into the owning ranks'
// gradient shards (sdk::UnitReducer, in reduce_dtype on the wire: f32, bf16
// or f16), non-blocking while the backward of the next unit runs. Each rank
// then clips by the global norm and updates only its own shard.
// docs/strategies/zero3.md describes it for users.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_gather.hpp"
#include "tessera/sdk/unit_reduce.hpp"
#include "tessera/sdk/unit_runner.hpp"
#include "tessera/sdk/unit_shards.hpp"
#include "zero3_options.hpp"

namespace tessera::strategies {

class Zero3Strategy final : public sdk::Strategy {
 public:
  // Accepts any world size >= 1; reads the options.
  static void check(const sdk::Host& host, const sdk::Options& options, int32_t world_size);

  // Allocates this rank's shards: parameters (PARAMS) and gradients (GRADS)
  // of Σ_u ceil(Ψ_u / N) elements each and the optimizer state of as many
  // elements (OPTIMIZER, through the host's optimizer table). Gathered
  // buffers are allocated during a step only (COMM).
  Zero3Strategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env);

  // Each rank is its own data-parallel slice: data rank = rank, data size =
  // world size.
  [[nodiscard]] tessera_strategy_layout layout() const override;
  // Reads the parameters and (when the reader has optimizer state) the
  // optimizer slots of this rank's pieces, by tensor name and element
  // range, so a checkpoint of any world size can be read. Not collective.
  // Errors of the reader propagate, naming the tensor.
  void load(const sdk::StateReader& reader) override;
  // Collective. Forward and backward over the micro-batches with every unit
  // gathered around its computation; the unit's full gradients accumulate
  // over the micro-batches and are reduce-scattered on the last one, while
  // the backward goes on; they are all waited for when it ends. The
  // global norm is the allreduced sum of the ranks' shard sums of squares;
  // each rank clips and updates its own shard. Returns this rank's share of
  // the loss, the norm before clipping, the time blocked and the bytes sent
  // on the world communicator. A failure of a peer or of the backend
  // propagates as tessera::Error after operations in flight are waited for.
  sdk::StepResult step(const sdk::StepArgs& args) override;
  // Writes this rank's pieces of the parameters and optimizer slots (every
  // element once across the world). When the writer wants all replicas,
  // collective: each unit is gathered in turn and all parameters written.
  void save(const sdk::StateWriter& writer) override;

 private:
  friend class Zero3Hooks;

  // This rank's piece of unit `u` in the parameter / gradient shards.
  [[nodiscard]] std::span<float> param_piece(int32_t u);
  [[nodiscard]] std::span<float> grad_piece(int32_t u);
  // Gathers the parameters unit `u` uses, frees every other gathered unit
  // except those `next` uses (whose gathers are started when prefetching;
  // next < 0: none) and binds the slot pointers.
  void use_unit(int32_t u, int32_t next);
  // Binds unit `u`'s gradient slots to the full gradient buffers of their
  // owners (allocated zeroed on first use in the step).
  void bind_grads(int32_t u);
  // After unit `u`'s backward on the last micro-batch: completes the
  // reduce-scatters started after the previous unit (they ran during u's
  // backward), then starts those of every owner whose gradients are
  // complete at `u`; the backward's last unit (0) waits for all of them.
  void finish_grads(int32_t u, bool last_micro);
  // Frees unit `owner`'s gathered parameters and unbinds its slots.
  void release_params(int32_t owner);
  // Frees every temporary buffer (waiting for operations in flight and
  // ignoring their errors) and unbinds every slot (end of a step, error
  // path).
  void release_all() noexcept;
  // Sets the parameter (or gradient) pointers of every slot using a
  // parameter `owner` owns to `base` + its offset in the unit (nullptr: unbind).
  void bind_owner(sdk::SlotPointers& ptrs, int32_t owner, float* base);

  sdk::Host host_;
  sdk::StrategyEnv& env_;
  Zero3Options options_;
  sdk::FlatLayout layout_;
  sdk::UnitShardLayout shards_;
  sdk::TrackedBuffer<float> params_;  // this rank's pieces, padding included
  sdk::TrackedBuffer<float> grads_;
  sdk::OptimState optim_;  // shard_elements() elements
  sdk::SlotPointers param_ptrs_;
  sdk::SlotPointers grad_ptrs_;
  std::vector<std::vector<int32_t>> done_at_;  // [u]: owners whose gradients complete at u
  sdk::UnitGather gather_;                     // gathered parameters
  sdk::UnitReducer reducer_;                   // full gradients and their reduce-scatters
  sdk::UnitRunner runner_;
};

}  // namespace tessera::strategies

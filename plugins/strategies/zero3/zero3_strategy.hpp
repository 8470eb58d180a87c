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

#include "tessera/sdk/data_parallel.hpp"
#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/unit_gather.hpp"
#include "tessera/sdk/unit_reduce.hpp"
#include "tessera/sdk/unit_runner.hpp"
#include "tessera/sdk/unit_shard_state.hpp"
#include "tessera/sdk/unit_shards.hpp"
#include "zero3_options.hpp"

namespace tessera::strategies {

class Zero3Strategy final : public sdk::DataParallelStrategy {
 public:
  // Accepts any world size >= 1; reads the options.
  static void check(const sdk::Host& host, const sdk::Options& options, int32_t world_size);

  // Takes only summable gradient compressors: it reduce-scatters (sdk::CompressorUse).
  static constexpr sdk::CompressorUse kCompressors = sdk::CompressorUse::kSummable;
  // The estimate (strategy 2.3; docs/strategies/zero3.md, "Estimate"):
  // memory per rank by category, bytes sent per step on the data axis and
  // the FLOPs of the largest slice. Refuses what check() refuses.
  static sdk::Estimate estimate(const sdk::Host& host, const sdk::Options& options,
                                const sdk::EstimateArgs& args);

  // Allocates this rank's shards: parameters (PARAMS) and gradients (GRADS)
  // of Σ_u ceil(Ψ_u / N) elements each and the optimizer state of as many
  // elements (OPTIMIZER, through the host's optimizer table). Gathered
  // buffers are allocated during a step only (COMM). Each rank is its own
  // data-parallel slice.
  Zero3Strategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env);

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

  // Frees every temporary buffer (waiting for operations in flight and
  // ignoring their errors) and unbinds every slot (end of a step, error
  // path).
  void release_all() noexcept;

  sdk::Host host_;
  sdk::StrategyEnv& env_;
  Zero3Options options_;
  sdk::FlatLayout layout_;
  sdk::UnitShardLayout shards_;
  sdk::UnitShardState state_;  // this rank's pieces, padding included
  sdk::SlotPointers param_ptrs_;
  sdk::SlotPointers grad_ptrs_;
  sdk::UnitGather gather_;    // gathered parameters
  sdk::UnitReducer reducer_;  // full gradients and their reduce-scatters
  sdk::UnitRunner runner_;
};

}  // namespace tessera::strategies

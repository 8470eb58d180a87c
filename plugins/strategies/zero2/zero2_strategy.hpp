// The `zero2` strategy: ZeRO stage 2 at the granularity of the model's
// units. Parameters are replicated on every rank (full f32 copy, 4Ψ bytes);
// gradients and optimizer state are sharded per unit exactly like `zero3`
// (sdk::UnitShardLayout: each rank keeps ceil(Ψ_u / N) elements of every
// unit u). During backward a unit's gradients go to a temporary full-size
// buffer that is reduce-scattered right after the unit's backward (started
// non-blocking with overlap = true) and added into this rank's gradient
// shard, on every micro-batch. After the backward each rank clips by the
// global norm, updates its own pieces of the parameters and allgathers every
// unit so all ranks hold the updated parameters again.
// docs/strategies/zero2.md describes it for users.
#pragma once

#include <cstdint>

#include "tessera/sdk/data_parallel.hpp"
#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/replicated_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/unit_reduce.hpp"
#include "tessera/sdk/unit_runner.hpp"
#include "tessera/sdk/unit_shard_state.hpp"
#include "tessera/sdk/unit_shards.hpp"
#include "zero2_options.hpp"

namespace tessera::strategies {

class Zero2Strategy final : public sdk::DataParallelStrategy {
 public:
  // Accepts any world size >= 1; reads and checks the options (an invalid
  // reduce_dtype is an invalid argument naming it).
  static void check(const sdk::Host& host, const sdk::Options& options, int32_t world_size);

  // Takes every kind of gradient compressor (sdk::CompressorUse).
  static constexpr sdk::CompressorUse kCompressors = sdk::CompressorUse::kAny;
  // The estimate (strategy 2.3; docs/strategies/zero2.md, "Estimate"):
  // memory per rank by category, bytes sent per step on the data axis and
  // the FLOPs of the largest slice. Refuses what check() refuses.
  static sdk::Estimate estimate(const sdk::Host& host, const sdk::Options& options,
                                const sdk::EstimateArgs& args);

  // Allocates the replicated parameters (PARAMS, Ψ elements), this rank's
  // gradient shard (GRADS, Σ_u ceil(Ψ_u / N) elements) and the optimizer
  // state of as many elements (OPTIMIZER, through the host's optimizer
  // table). Per-unit gradient buffers exist during a step only (COMM).
  // Each rank is its own data-parallel slice.
  Zero2Strategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env);

  // Reads every parameter (they are replicated) and, when the reader has
  // optimizer state, the optimizer slots of this rank's pieces, by tensor
  // name and element range, so a checkpoint of any world size can be read.
  // Not collective. Errors of the reader propagate, naming the tensor.
  void load(const sdk::StateReader& reader) override;
  // Collective. Forward and backward over the micro-batches; after each
  // unit's backward on every micro-batch its gradients are reduce-scattered
  // and added into this rank's gradient shard. The global norm is the
  // allreduced sum of the ranks' shard sums of squares; each rank clips and
  // updates its own pieces, then every unit's parameters are allgathered.
  // Returns this rank's share of the loss, the norm before clipping, the
  // time blocked and the bytes sent on the world communicator. A failure of
  // a peer or of the backend propagates as tessera::Error after operations
  // in flight are waited for.
  sdk::StepResult step(const sdk::StepArgs& args) override;
  // Writes the parameters (all of them when the writer wants every replica,
  // otherwise this rank's pieces, so every element is written once across
  // the world) and this rank's pieces of the optimizer slots. Not
  // collective.
  void save(const sdk::StateWriter& writer) override;

 private:
  friend class Zero2Hooks;

  // Allgathers every unit's parameters from the ranks' updated pieces into
  // the replicated parameters. Collective; throws the backend's error.
  void gather_params();

  sdk::Host host_;
  sdk::StrategyEnv& env_;
  Zero2Options options_;
  sdk::FlatLayout layout_;
  sdk::UnitShardLayout shards_;
  sdk::ReplicatedParams params_;  // full parameters, no replicated gradients
  sdk::UnitShardState state_;     // gradient and optimizer pieces, padding included
  sdk::SlotPointers grad_ptrs_;
  sdk::UnitReducer reducer_;
  sdk::UnitRunner runner_;
};

}  // namespace tessera::strategies

// The `none` strategy: one rank trains the whole model alone. Parameters,
// gradients and optimizer state are single flat buffers; a step runs every
// micro-batch forward and backward (gradients accumulate), clips by the
// global norm and applies one optimizer update. It is the reference every
// distributed strategy is compared with.
#pragma once

#include <cstdint>

#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/replicated_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/unit_runner.hpp"

namespace tessera::strategies {

class NoneStrategy final : public sdk::Strategy {
 public:
  // Refuses any world size but 1 (invalid argument), naming the world size
  // and pointing at `ddp`.
  static void check(const sdk::Host& host, const sdk::Options& options, int32_t world_size);

  // Takes no gradient compressor (sdk::CompressorUse).
  static constexpr sdk::CompressorUse kCompressors = sdk::CompressorUse::kNone;
  // The estimate (strategy 2.3; docs/strategies/none.md, "Estimate"):
  // memory per rank by category, bytes sent per step on the data axis and
  // the FLOPs of the largest slice. Refuses what check() refuses.
  static sdk::Estimate estimate(const sdk::Host& host, const sdk::Options& options,
                                const sdk::EstimateArgs& args);

  // Allocates parameters and gradients (tracked as PARAMS and GRADS) and the
  // optimizer state for the whole model. Throws like check() when the world
  // has more than one rank, and std::bad_alloc when memory runs out.
  NoneStrategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env);

  // The whole global batch: data rank 0 of 1.
  [[nodiscard]] tessera_strategy_layout layout() const override;
  // Reads every parameter, and the optimizer state when the reader has all
  // of it (none: fresh state; part of it: error naming the missing tensor).
  void load(const sdk::StateReader& reader) override;
  // Forward/backward over the micro-batches, clip, one optimizer update.
  // The loss is the sum of the micro-batches' scaled losses; no
  // communication happens. Errors of the model or optimizer propagate; a
  // non-finite gradient norm is an error and leaves the parameters as they
  // were.
  sdk::StepResult step(const sdk::StepArgs& args) override;
  // Writes every parameter and optimizer slot whole.
  void save(const sdk::StateWriter& writer) override;

 private:
  sdk::Host host_;
  sdk::StrategyEnv& env_;
  sdk::FlatLayout layout_;
  sdk::ReplicatedParams state_;
  sdk::OptimState optim_;
  sdk::UnitRunner runner_;
};

}  // namespace tessera::strategies

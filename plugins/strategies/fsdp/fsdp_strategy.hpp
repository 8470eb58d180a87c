// The `fsdp` strategy: fully sharded data parallel on Tessera units. Each
// FSDP unit (one model unit with wrap = unit, a run of consecutive model
// units holding at least min_params parameters with wrap = min_params) has
// its owned parameters split evenly over the G ranks of a sharding group
// (sdk::UnitShardLayout); each rank keeps its pieces of the parameters,
// gradients and optimizer state in f32. Parameters may be allgathered in
// param_dtype and gradients reduced in reduce_dtype (bf16 or f16). When
// G > 1 a unit's gradients are reduce-scattered in its group as soon as they
// are complete on the last micro-batch, non-blocking while the backward goes
// on (sdk::UnitReducer). The sharding_strategy option picks G and when
// gathered parameters are freed:
//
//   full_shard     G = N; each unit gathered before its forward and again
//                  before its backward, freed after each (like zero3).
//   shard_grad_op  G = N; each unit gathered before its forward and kept
//                  until its backward is done.
//   no_shard       G = 1; parameters used in place, each unit's gradients
//                  allreduced over the world once they are complete.
//   hybrid_shard   G = shard_group_size consecutive ranks; full_shard inside
//                  the group, then each gradient piece allreduced over the
//                  N / G ranks with the same index in their group once its
//                  reduce-scatter is done.
//
// docs/strategies/fsdp.md describes it for users.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "fsdp_options.hpp"
#include "tessera/sdk/data_parallel.hpp"
#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/grad_codec.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/unit_gather.hpp"
#include "tessera/sdk/unit_reduce.hpp"
#include "tessera/sdk/unit_runner.hpp"
#include "tessera/sdk/unit_shard_state.hpp"
#include "tessera/sdk/unit_shards.hpp"

namespace tessera::strategies {

class FsdpStrategy final : public sdk::DataParallelStrategy {
 public:
  // Reads and checks the options against the world size (see
  // FsdpOptions::read); throws tessera::Error naming the bad option.
  static void check(const sdk::Host& host, const sdk::Options& options, int32_t world_size);

  // Takes only summable gradient compressors: it reduce-scatters (sdk::CompressorUse).
  static constexpr sdk::CompressorUse kCompressors = sdk::CompressorUse::kSummable;
  // The estimate (strategy 2.3; docs/strategies/fsdp.md, "Estimate"):
  // memory per rank by category, bytes sent per step on the data axis and
  // the FLOPs of the largest slice. Refuses what check() refuses.
  static sdk::Estimate estimate(const sdk::Host& host, const sdk::Options& options,
                                const sdk::EstimateArgs& args);

  // Allocates this rank's pieces: parameters (PARAMS) and gradients (GRADS)
  // of Σ_u ceil(Ψ_u / G) elements each and the optimizer state of as many
  // elements (OPTIMIZER). Not collective: the group communicators are split
  // on the first collective call (step, or save with all replicas). Each
  // rank is its own data-parallel slice.
  FsdpStrategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env);

  // Reads the parameters and (when present) optimizer slots of this rank's
  // pieces by tensor name and element range, so a checkpoint of any world
  // size or sharding strategy can be read. Not collective. Errors of the
  // reader propagate.
  void load(const sdk::StateReader& reader) override;
  // Collective. Forward and backward of the micro-batches with the
  // parameters gathered per the sharding strategy; gradients reduced on the
  // last micro-batch; global-norm clipping; each rank updates its pieces.
  // Failures of a peer or the backend propagate as tessera::Error after the
  // operations in flight are waited for and the temporary buffers freed.
  sdk::StepResult step(const sdk::StepArgs& args) override;
  // Writes this rank's pieces (only the ranks of the first sharding group,
  // so every element is written once). With all replicas: collective, each
  // unit gathered in its group and every parameter written by every rank.
  void save(const sdk::StateWriter& writer) override;

 private:
  friend class FsdpHooks;

  // Splits the world into the sharding group and the replica group (once;
  // collective on the first call).
  void ensure_comms();
  // The communicator of the sharding group (the world when G = N).
  [[nodiscard]] sdk::CommView& group();
  // The first model unit after `m` in `direction` (+1 forward, -1
  // backward) that uses an FSDP unit `m` does not (the one worth
  // prefetching); -1 if none.
  [[nodiscard]] int32_t next_other(int32_t m, int32_t direction) const;
  // Gathers (G > 1) the FSDP units model unit `u` uses and binds them;
  // frees other gathered units except those model unit `next` uses
  // (shard_grad_op keeps every unit until its backward is done); starts
  // the gathers of `next`'s FSDP units when prefetching.
  void use_unit(int32_t u, int32_t next, bool free_others);
  // Binds model unit `u`'s gradient slots (full gradient buffers when G > 1).
  void bind_grads(int32_t u);
  // After model unit `u`'s backward: shard_grad_op frees the parameters no
  // lower unit uses. On the last micro-batch, G > 1: the reduce-scatters
  // started after the previous model unit are completed (and their pieces
  // allreduced over the replicas), then those of the FSDP units complete at
  // `u` are started; model unit 0 waits for all. G = 1: the complete
  // gradients are allreduced over the world at once. All in reduce_dtype.
  void finish_unit(int32_t u, bool last_micro);
  // Frees every temporary buffer (waiting for operations in flight and
  // ignoring their errors) and unbinds the gathered slots.
  void release_all() noexcept;

  sdk::Host host_;
  sdk::StrategyEnv& env_;
  FsdpOptions options_;
  int32_t group_size_;
  // reduce_dtype's cast or the run's compressor (summable only: the
  // gradients are reduce-scattered, or with G = 1 allreduced per unit).
  sdk::GradCodec codec_;
  sdk::FlatLayout layout_;
  sdk::UnitShardLayout shards_;
  sdk::UnitShardState state_;  // this rank's pieces, f32
  sdk::SlotPointers param_ptrs_;
  sdk::SlotPointers grad_ptrs_;
  bool comms_ready_ = false;
  std::unique_ptr<sdk::CommView> group_split_;    // 1 < G < N
  std::unique_ptr<sdk::CommView> replica_split_;  // 1 < G < N
  sdk::CommView* replicas_ = nullptr;             // N / G > 1: ranks with the same group index
  std::unique_ptr<sdk::UnitGather> gather_;       // G > 1: gathered parameters
  std::unique_ptr<sdk::UnitReducer> reducer_;     // G > 1: full gradients, reduce-scatters
  std::vector<std::optional<sdk::BucketCodec>> unit_codecs_;  // G = 1: per unit, made on use
  sdk::UnitRunner runner_;
};

}  // namespace tessera::strategies

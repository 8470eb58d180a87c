// The `zero1` strategy: ZeRO stage 1. Every rank holds the whole model's
// parameters and gradients (flat f32 buffers, replicated, padded to a
// multiple of N) and trains on its own slice of the global batch; the
// optimizer state is cut into N equal shards and each rank keeps and
// updates only its own: block r of every gradient bucket (ShardGrid). As
// in the ZeRO paper, gradients are reduce-scattered bucket by bucket during
// backward, in place in the full gradient buffer, so each rank receives the
// sums of its own blocks only; the clip norm comes from the shards' sums of
// squares (one f64 scalar allreduced), each rank applies the optimizer to
// its blocks, and the buckets are allgathered in place in the parameter
// buffer so every rank again holds the same, bit-identical parameters: 2Ψ
// elements sent per step, nothing staged. docs/strategies/zero1.md
// describes it for users.
#pragma once

#include <cstdint>
#include <memory>

#include "shard_grid.hpp"
#include "tessera/sdk/data_parallel.hpp"
#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/node_groups.hpp"
#include "tessera/sdk/replicated_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/unit_runner.hpp"
#include "zero1_options.hpp"

namespace tessera::strategies {

class Zero1Strategy final : public sdk::DataParallelStrategy {
 public:
  // Accepts any world size >= 1; checks the options (see Zero1Options::read).
  static void check(const sdk::Host& host, const sdk::Options& options, int32_t world_size);

  // Takes every kind of gradient compressor (sdk::CompressorUse).
  static constexpr sdk::CompressorUse kCompressors = sdk::CompressorUse::kAny;
  // The estimate (strategy 2.3; docs/strategies/zero1.md, "Estimate"):
  // memory per rank by category, bytes sent per step on the data axis and
  // the FLOPs of the largest slice. Refuses what check() refuses.
  static sdk::Estimate estimate(const sdk::Host& host, const sdk::Options& options,
                                const sdk::EstimateArgs& args);

  // Plans the gradient buckets and allocates the replicated parameters and
  // gradients (PARAMS, GRADS, padded to N shards) and the optimizer state of
  // this rank's shard (OPTIMIZER, through the host's optimizer table); no
  // communication staging (COMM).
  // Collective only in that every rank must create it (and, with
  // hierarchy = "node", in the split of the world into the intra- and
  // inter-node communicators). Each rank is its own data-parallel slice.
  Zero1Strategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env);

  // Collective. Reads the parameters of this rank's blocks and allgathers
  // them (every element comes from exactly one rank, so the replicas start
  // bit-identical); reads the optimizer state of the shard when the reader
  // has optimizer state (part of it is an error naming the missing tensor).
  // Works for a checkpoint written at any world size: only the elements
  // this rank owns are read, by tensor name and element range.
  void load(const sdk::StateReader& reader) override;
  // Collective. Forward/backward over the micro-batches with the bucketed
  // SUM reduce-scatter of the gradients (overlapped unless overlap = false),
  // then clips by the global norm (shard sums of squares allreduced), runs the
  // optimizer on this rank's shard only and allgathers the updated shards.
  // Returns this rank's share of the loss, the norm before clipping, and
  // the time blocked and bytes sent on the world communicator (and the
  // node communicators; the inter-node one's bytes also as
  // comm_bytes_cross_node). A failure of
  // a peer or the backend propagates as tessera::Error after pending
  // operations are waited for.
  sdk::StepResult step(const sdk::StepArgs& args) override;
  // Each rank writes the parameters and optimizer slots of its blocks (each
  // element once across the world); when the writer wants all replicas, the
  // rank writes every parameter and its optimizer shard.
  void save(const sdk::StateWriter& writer) override;

 private:
  // Sum of squares of this rank's blocks of the (reduced) gradients.
  double shard_sum_squares();

  sdk::Host host_;
  sdk::StrategyEnv& env_;
  Zero1Options options_;
  sdk::FlatLayout layout_;
  std::unique_ptr<sdk::NodeGroups> nodes_;  // hierarchy = "node"; before grid_
  ShardGrid grid_;                          // before state_: it sizes the padding
  sdk::ReplicatedParams state_;
  sdk::OptimState optim_;  // the rank's blocks in plan order, padding included
  sdk::UnitRunner runner_;
};

}  // namespace tessera::strategies

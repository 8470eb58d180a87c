// The `ddp` strategy: distributed data parallel. Every rank holds the whole
// model (parameters, gradients and optimizer state replicated as flat f32
// buffers) and trains on its own slice of the global batch. Gradients are
// summed across ranks bucket by bucket while the backward pass is still
// running, so every rank applies the same update and the replicas stay
// bit-identical. docs/strategies/ddp.md describes it for users.
#pragma once

#include <cstdint>
#include <memory>

#include "ddp_options.hpp"
#include "tessera/sdk/bucket_reducer.hpp"
#include "tessera/sdk/data_parallel.hpp"
#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/node_groups.hpp"
#include "tessera/sdk/replicated_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/unit_runner.hpp"

namespace tessera::strategies {

class DdpStrategy final : public sdk::DataParallelStrategy {
 public:
  // Accepts any world size >= 1; checks the options (see DdpOptions::read
  // and sdk::BucketOptions::node_size).
  static void check(const sdk::Host& host, const sdk::Options& options, int32_t world_size);

  // Takes every kind of gradient compressor (sdk::CompressorUse).
  static constexpr sdk::CompressorUse kCompressors = sdk::CompressorUse::kAny;
  // The estimate (strategy 2.3; docs/strategies/ddp.md, "Estimate"):
  // memory per rank by category, bytes sent per step on the data axis and
  // the FLOPs of the largest slice. Refuses what check() refuses.
  static sdk::Estimate estimate(const sdk::Host& host, const sdk::Options& options,
                                const sdk::EstimateArgs& args);

  // Allocates the replicated state (PARAMS, GRADS, the optimizer's state,
  // a COMM staging buffer for a 16-bit reduce_dtype) and plans the buckets.
  // Collective only in that every rank must create it; no communication
  // but, with hierarchy = "node", the split of the world into the intra-
  // and inter-node communicators. Each rank is its own data-parallel slice.
  DdpStrategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env);

  // Collective. Reads every parameter, then broadcasts them from rank 0 so
  // all replicas start bit-identical; reads the optimizer state when the
  // reader has all of it (part of it is an error naming the missing tensor).
  void load(const sdk::StateReader& reader) override;
  // Collective. Forward/backward over the micro-batches, accumulating
  // gradients locally; on the last micro-batch each complete bucket's SUM
  // allreduce starts right after the backward of the unit that completes it
  // (with overlap = false: after the whole backward). Then waits for all,
  // clips by the global norm (the local norm: gradients are replicated) and
  // applies the optimizer. Returns this rank's share of the loss, the norm
  // before clipping, and the time blocked and bytes sent on the world
  // communicator (and the node communicators; the inter-node one's bytes
  // also as comm_bytes_cross_node) during the step. A failure of a peer or the backend
  // propagates as tessera::Error after pending operations are waited for.
  sdk::StepResult step(const sdk::StepArgs& args) override;
  // Rank 0 (every rank when the writer wants all replicas) writes every
  // parameter and optimizer slot whole; other ranks write nothing.
  void save(const sdk::StateWriter& writer) override;

 private:
  sdk::Host host_;
  sdk::StrategyEnv& env_;
  DdpOptions options_;
  sdk::FlatLayout layout_;
  sdk::ReplicatedParams state_;
  sdk::OptimState optim_;
  sdk::UnitRunner runner_;
  std::unique_ptr<sdk::NodeGroups> nodes_;  // hierarchy = "node"; before reducer_
  sdk::BucketReducer reducer_;
};

}  // namespace tessera::strategies

// The `tensor` strategy: tensor parallelism (Megatron-LM). The world is
// `size` ranks per tensor group times dp data-parallel replicas; rank r is
// position r % size of tensor group r / size, which is also its data rank.
// Every parameter the model marks COLUMN or ROW is cut along that dimension
// (each of its split_blocks separately) and a rank holds only its shard
// (parameters, gradients and optimizer state); REPLICATED parameters are
// held whole by every rank. The units compute on the shards and call the
// tensor group themselves (tessera_tp_group); the strategy runs forward and
// backward over the micro-batches, sums each rank's gradients over its
// data-parallel group, clips by the global norm (split tensors summed over
// the tensor group, replicated ones counted once) and updates. In sequence
// mode (TESSERA_TP_SEQUENCE) the units also split the token rows between
// their column/row pairs, and the replicated gradients, each rank's part
// from its rows, are summed over the tensor group first. Checkpoints hold
// whole tensors: every rank writes and reads its shards as N-d boxes.
// docs/strategies/tensor.md describes it for users.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tensor_options.hpp"
#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/mesh.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tensor_group.hpp"
#include "tessera/sdk/tensor_shards.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_runner.hpp"

namespace tessera::strategies {

class TensorStrategy final : public sdk::Strategy {
 public:
  // Checks the options against the world size (see TensorOptions::read).
  static void check(const sdk::Host& host, const sdk::Options& options, int32_t world_size);

  // Takes no gradient compressor (sdk::CompressorUse).
  static constexpr sdk::CompressorUse kCompressors = sdk::CompressorUse::kNone;
  // The estimate (strategy 2.3): per rank its shards and replicated
  // tensors (parameters, gradients, optimizer state), one context per unit
  // for a micro-batch, the tensor group's and the data-parallel group's
  // bytes per step. Refuses (invalid argument) a size that does not divide
  // the world and a model that cannot split (as the constructor does).
  // docs/strategies/tensor.md.
  static sdk::Estimate estimate(const sdk::Host& host, const sdk::Options& options,
                                const sdk::EstimateArgs& args);

  // Collective: with size > 1 refuses (invalid argument) a unit without
  // TESSERA_UNIT_TENSOR_PARALLEL (in sequence mode also without
  // TESSERA_UNIT_SEQUENCE_PARALLEL), naming it; what the model's
  // check_tensor_parallel refuses, with the options; and a split dimension
  // size does not divide, naming the parameter, its shape and the option
  // (the last unit's COLUMN parameters are kept whole instead, logged); then
  // splits the world into the tensor and data-parallel groups and
  // allocates this rank's shards. Rank 0 logs what is split.
  TensorStrategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env);
  TensorStrategy(const TensorStrategy&) = delete;
  TensorStrategy& operator=(const TensorStrategy&) = delete;
  ~TensorStrategy() override = default;

  // The ranks of one tensor group share a data rank.
  [[nodiscard]] tessera_strategy_layout layout() const override;
  // Reads this rank's shards and whole replicated tensors (parameters and,
  // when present, optimizer state).
  void load(const sdk::StateReader& reader) override;
  // Forward and backward over the micro-batches with the tensor group, the
  // data-parallel sum, clipping by the global norm, the optimizer. Logs
  // (debug) the bytes the tensor group and the data-parallel group sent.
  sdk::StepResult step(const sdk::StepArgs& args) override;
  // Replica 0's ranks write their shards as boxes, its tensor rank 0 the
  // replicated tensors (every rank everything it holds when the writer
  // wants all replicas).
  void save(const sdk::StateWriter& writer) override;

 private:
  void plan(const sdk::ModelView& model);
  // The TESSERA_TP_* bits of the units' group.
  [[nodiscard]] uint32_t group_flags() const noexcept {
    return options_.sequence ? static_cast<uint32_t>(TESSERA_TP_SEQUENCE) : 0U;
  }
  double forward_backward(const sdk::StepArgs& args);
  [[nodiscard]] double sum_squares();

  sdk::Host host_;
  sdk::StrategyEnv& env_;
  TensorOptions options_;
  sdk::Mesh mesh_;  // dp x tp: a tensor group is tp_size_ consecutive ranks
  int32_t tp_size_;
  int32_t dp_size_;
  int32_t tp_rank_;
  int32_t dp_rank_;
  sdk::FlatLayout flat_;
  sdk::TensorShards shards_;  // what this rank holds of each flat entry
  sdk::TrackedBuffer<float> params_;
  sdk::TrackedBuffer<float> grads_;
  sdk::SlotPointers param_ptrs_;
  sdk::SlotPointers grad_ptrs_;
  sdk::OptimState optim_;
  std::unique_ptr<sdk::CommView> tp_;        // this rank's tensor group, rank = position
  std::unique_ptr<sdk::CommView> dp_;        // this position in every replica
  std::unique_ptr<sdk::TensorGroup> group_;  // the units' group over tp_, counted
  sdk::UnitRunner runner_;  // the units with the group, checkpointing as the options say
};

}  // namespace tessera::strategies

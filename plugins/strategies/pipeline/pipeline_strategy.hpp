// The `pipeline` strategy: pipeline parallelism. The model's units are
// split into `stages` x `virtual_stages` contiguous chunks (one per stage,
// or v per stage under the interleaved schedule: chunk c runs on stage
// c % stages); rank r is stage r % stages of data-parallel replica
// r / stages. A stage holds only its chunks' parameters, gradients and
// optimizer state (plus a copy of a tied parameter owned by another stage,
// e.g. gpt's embedding on the head's stage), streams the step's
// micro-batches through its chunks on a GPipe, 1F1B, interleaved 1F1B or
// zero-bubble H1 (split backward) schedule, and exchanges activations and
// their gradients with the neighbouring stages by point-to-point sends and
// receives. Each unit's gradients are summed over the stage's replicas as
// soon as its last backward of the step is done (overlapping the rest of
// the cool-down), tied gradients between the stages that share them once
// the pipeline drains, and the update clips by the global norm over all
// stages. docs/strategies/pipeline.md describes it for users.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "pipeline_options.hpp"
#include "pipeline_partition.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/mesh.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tensor_group.hpp"
#include "tessera/sdk/tensor_shards.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::strategies {

class PipelineStrategy final : public sdk::Strategy {
 public:
  // Checks the options against the world size (see PipelineOptions::read).
  static void check(const sdk::Host& host, const sdk::Options& options, int32_t world_size);

  // Collective: plans the stages (more stages than units, a boundary out
  // of range, or zb1 with a unit that cannot split its backward is an
  // invalid argument naming the option or the unit), splits the world
  // into the pipeline, data-parallel and tied-parameter groups, and
  // allocates this stage's parameters, gradients and optimizer state. Rank
  // 0 logs every stage's units and share of the cost.
  PipelineStrategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env);
  // The same from options already read (the `hybrid` strategy's, with a
  // tensor axis: options.tp ranks per tensor group inside every stage;
  // the world is data-parallel replicas x stages x tp, tp innermost).
  PipelineStrategy(const sdk::Host& host, PipelineOptions options, sdk::StrategyEnv& env);
  PipelineStrategy(const PipelineStrategy&) = delete;
  PipelineStrategy& operator=(const PipelineStrategy&) = delete;
  // Reports the contexts' activation bytes as freed.
  ~PipelineStrategy() override;

  // Stages of one replica share a data rank (they train on the same examples).
  [[nodiscard]] tessera_strategy_layout layout() const override;
  // Reads this stage's parameters (and tied copies) and optimizer state.
  void load(const sdk::StateReader& reader) override;
  // Runs the schedule over the micro-batches, then reduces, clips and
  // updates. 1f1b with fewer micro-batches than stages, or interleaved with
  // micro-batches not a multiple of stages, is an invalid argument naming
  // data.micro_batches, raised before any compute.
  sdk::StepResult step(const sdk::StepArgs& args) override;
  // Replica 0 writes its stage's own tensors (every rank everything it
  // holds, tied copies included, when the writer wants all replicas).
  void save(const sdk::StateWriter& writer) override;

 private:
  // A micro-batch in flight: its units' contexts and its messages.
  struct Slot {
    std::vector<sdk::UnitContext> contexts;  // one per unit of the stage
    std::vector<int64_t> context_bytes;      // reported as ACTIVATIONS, per context
    std::vector<float> input;                // activations received from the previous stage
    std::array<int64_t, 2> input_shape{};
    std::vector<float> grad;             // gradient received from the next stage
    int64_t grad_clock = 0;              // the next stage's schedule clock when it sent it
    std::array<int64_t, 3> out_shape{};  // rows, cols, clock: sent ahead of the activations
    int64_t sent_clock = 0;              // sent with the input gradient
    sdk::PendingOp grad_recv;
    sdk::PendingOp grad_clock_recv;
    std::vector<sdk::PendingOp> sends;
  };
  // One model chunk of this stage: its units, their micro-batch slots, and
  // the shapes of its inputs, received ahead.
  struct Chunk {
    int32_t index = 0;  // global chunk index (its stage: index % stages)
    int32_t first_unit = 0;
    int32_t end_unit = 0;
    sdk::FlatRange own;  // flat range of its parameters
    uint64_t at = 0;     // where they start in the buffers
    // Made on demand, kept between steps; a deque, so that a slot added
    // mid-step leaves the others (and their pending messages) in place.
    std::deque<Slot> slots;
    std::vector<int32_t> slot_of;     // per micro-batch of the step: its slot, or -1
    std::vector<int32_t> free_slots;  // slots no micro-batch holds
    std::vector<int64_t> shapes;      // rows, cols, clock per micro-batch
    std::vector<sdk::PendingOp> shape_recvs;
  };
  // A parameter used by several stages and the group that sums its gradient.
  struct TiedGroup {
    size_t entry = 0;
    std::unique_ptr<sdk::CommView> comm;
  };

  [[nodiscard]] uint64_t offset_of(size_t entry) const;
  // With the optimizer state sharded over the replicas: fn(key, shape,
  // whole_offset, values) for each piece of this replica's slice of every
  // held entry `which` selects (all when empty), per optimizer slot.
  template <class Fn>
  void for_each_optimizer_piece(const std::function<bool(size_t)>& which, Fn&& fn);
  // The units' tensor-parallel group (null without a tensor axis).
  [[nodiscard]] const tessera_tp_group* units_group() const noexcept {
    return group_ != nullptr ? group_->get() : nullptr;
  }
  [[nodiscard]] uint32_t group_flags() const noexcept {
    return options_.sequence ? static_cast<uint32_t>(TESSERA_TP_SEQUENCE) : 0U;
  }
  [[nodiscard]] bool owns_unit(int32_t unit) const;
  double run_schedule(const sdk::StepArgs& args);
  void forward(const sdk::StepArgs& args, Chunk& chunk, int32_t micro, double& loss);
  // The whole backward, or under zb1 its input half.
  void backward(Chunk& chunk, int32_t micro);
  // zb1: the weight half of a backward.
  void backward_weight(Chunk& chunk, int32_t micro);
  void wait_sends(Slot& slot);
  // Runs the units' compute `work`: its wall time counts as busy, and its
  // thread CPU time as busy on the schedule clock, which it advances.
  template <class Work>
  void compute(Work&& work);
  // Work that needed a message sent at `sender_clock` starts no earlier.
  void arrive(int64_t sender_clock) noexcept;
  // After the last gradient pass of `unit` in the step: starts the
  // replicas' sum of every unit whose gradients are now complete.
  void unit_done(int32_t unit);
  // Reports the change of context `unit` of `slot` to the host (ACTIVATIONS).
  void account(Slot& slot, size_t unit);
  void add_slot(Chunk& chunk);
  // A free slot of `chunk` for `micro` (a new one when none is free), and
  // the slot `micro` holds; release hands it back after the last half of
  // the micro-batch's backward.
  Slot& take_slot(Chunk& chunk, int32_t micro);
  Slot& slot_of(Chunk& chunk, int32_t micro);
  static void release_slot(Chunk& chunk, int32_t micro);
  void drop_pending() noexcept;
  void reduce_grads();
  // After the schedule: the longest wall span and schedule clock over the
  // pipeline's stages (collective over the pipeline).
  std::array<double, 2> longest_spans();
  [[nodiscard]] double sum_squares();
  void log_plan(const sdk::ModelView& model) const;

  sdk::Host host_;
  sdk::StrategyEnv& env_;
  PipelineOptions options_;
  // dp x pp x tp (tp innermost; of size 1 for the pipeline strategy): a
  // tensor group is consecutive ranks, a replica's stages x tensor ranks
  // too.
  sdk::Mesh mesh_;
  int32_t stages_;
  int32_t replicas_;
  int32_t stage_;
  int32_t replica_;
  int32_t tp_rank_;
  StagePlan plan_;
  sdk::FlatLayout flat_;
  std::deque<Chunk> chunks_;               // this stage's chunks, in model order
  sdk::TensorShards shards_;               // what it holds of each entry, and where
  std::vector<sdk::FlatRange> unit_held_;  // per unit, its own tensors in the buffers
  size_t own_count_ = 0;                   // own entries (held first)
  uint64_t own_total_ = 0;                 // elements of its own parameters (buffer front)
  std::vector<size_t> foreign_;            // entries owned elsewhere, used here (tied)
  uint64_t total_ = 0;                     // own + foreign elements
  // The held elements this replica updates (all of them unless the
  // optimizer state is sharded over the replicas) and where they start.
  uint64_t slice_ = 0;
  uint64_t slice_at_ = 0;
  sdk::TrackedBuffer<float> params_;
  sdk::TrackedBuffer<float> grads_;
  sdk::SlotPointers param_ptrs_;
  sdk::SlotPointers grad_ptrs_;
  sdk::OptimState optim_;
  std::unique_ptr<sdk::CommView> pipe_;  // the stages of this replica, rank = stage
  std::unique_ptr<sdk::CommView> dp_;    // this stage in every replica
  // With a tensor axis (options_.tp > 1): this rank's tensor group, the
  // stages x tensor ranks of its replica (for the norm), and the units'
  // counted group over tp_.
  std::unique_ptr<sdk::CommView> tp_;
  std::unique_ptr<sdk::CommView> norm_group_;
  std::unique_ptr<sdk::TensorGroup> group_;
  std::vector<TiedGroup> tied_;
  // Per unit of this stage, the units of this stage whose gradient passes
  // must finish before its gradients are complete (its parameters' users),
  // and per unit the units it completes; per step, how many are left.
  std::vector<int32_t> users_left_init_;
  std::vector<std::vector<int32_t>> completes_;
  std::vector<int32_t> users_left_;
  std::vector<sdk::PendingOp> dp_sums_;  // the replicas' sums in flight
  // The last schedule: wall time of the units' compute, its thread CPU
  // time, this stage's schedule clock (CPU time plus waits for messages
  // sent later on their senders' clocks), and the wall time from its start
  // to its last send.
  int64_t busy_ns_ = 0;
  int64_t cpu_ns_ = 0;
  int64_t clock_ns_ = 0;
  int64_t span_ns_ = 0;
};

}  // namespace tessera::strategies

// PipelineEngine, the `pipeline` strategy's engine (and, with a tensor
// axis, the `hybrid` strategy's): pipeline parallelism. The model's units are
// split into `stages` x `virtual_stages` contiguous chunks (one per stage,
// or v per stage under the interleaved schedule: chunk c runs on stage
// c % stages). The ranks form a replicas x stages x tp mesh (sdk::Mesh, tp
// innermost; tp = 1 for the `pipeline` strategy): rank r is tensor rank
// r % tp of stage (r / tp) % stages of data-parallel replica
// r / (tp x stages). A stage holds only its chunks' parameters, gradients and
// optimizer state (plus a copy of a tied parameter owned by another stage,
// e.g. gpt's embedding on the head's stage), streams the step's
// micro-batches through its chunks on a GPipe, 1F1B, interleaved 1F1B or
// zero-bubble H1 (split backward) schedule, and exchanges activations and
// their gradients with the neighbouring stages by point-to-point sends and
// receives. Each unit's gradients are summed over the stage's replicas as
// soon as its last backward of the step is done (overlapping the rest of
// the cool-down), tied gradients between the stages that share them once
// the pipeline drains, and the update clips by the global norm over all
// stages. With tp > 1 every stage is a tensor-parallel group: its tensors
// are held as shards (sdk::TensorShards) and every unit call gets the
// group (sdk::TensorGroup); shard_optimizer / shard_gradients cut the
// optimizer state (and reduce-scatter the gradients) over the replicas.
// docs/strategies/pipeline.md and hybrid.md describe it for users.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/flat_state.hpp"
#include "tessera/sdk/mesh.hpp"
#include "tessera/sdk/parallel_estimate.hpp"
#include "tessera/sdk/pipeline_plan.hpp"
#include "tessera/sdk/step_frame.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tensor_group.hpp"
#include "tessera/sdk/tensor_shards.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_contexts.hpp"

namespace tessera::sdk {

namespace pipeline_detail {

// Message kinds between neighbouring chunks; the tag is the kind plus 4 x
// the boundary (the index of the receiving chunk of the activations), and
// each tag carries its messages in micro-batch order.
inline constexpr int32_t kTagShape = 0;  // [rows, cols, sender's schedule clock] of the activations
inline constexpr int32_t kTagActivations = 1;
inline constexpr int32_t kTagGradients = 2;
inline constexpr int32_t kTagGradientClock = 3;  // the sender's schedule clock with the gradients
inline constexpr int32_t kTagKinds = 4;

inline int32_t tag(int32_t kind, int32_t boundary) { return kind + kTagKinds * boundary; }

// The stage plan of `units` units whose forward + backward costs are
// `cost` (the same for a built model and for its description, so that an
// estimate and the run agree on which units each stage holds).
inline StagePlan make_plan(const PipelineOptions& options, int32_t units,
                           const std::vector<double>& cost) {
  if (options.virtual_stages > 1 && options.chunks() > units) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                ::tessera::detail::concat(options.who, ": ", options.stages_key,
                                          " x virtual_stages = ", options.stages, " x ",
                                          options.virtual_stages, " = ", options.chunks(),
                                          " model chunks is more than the model's ", units,
                                          " units (every chunk needs at least one unit)"));
  }
  if (options.stages > units) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                ::tessera::detail::concat(options.who, ": ", options.stages_key, " = ",
                                          options.stages, " is more than the model's ", units,
                                          " units (every stage needs at least one unit)"));
  }
  if (options.explicit_partition) return explicit_plan(options.boundaries, units, options.who);
  return balanced_plan(cost, options.chunks());
}

inline StagePlan make_plan(const PipelineOptions& options, const sdk::ModelView& model) {
  std::vector<double> cost;
  for (int32_t u = 0; u < model.num_units(); ++u) {
    const tessera_unit_cost c = model.unit_cost(u);
    cost.push_back(c.forward_flops + c.backward_flops);
  }
  return make_plan(options, model.num_units(), cost);
}

// One forward or backward of a micro-batch through a local chunk (zb1:
// the backward's input half, or with `weight` its weight half).
struct PipeWork {
  bool forward = true;
  int32_t chunk = 0;  // local chunk index
  int32_t micro = 0;
  bool weight = false;
};

// Zero-bubble H1 (Qi et al. 2023): every stage, at each time slot of a
// simulation where F, B (input half) and W (weight half) take one slot
// each, runs a ready F while fewer than p - s micro-batches wait for their
// B (1F1B's bound) and fewer than p for their W (1F1B's peak, stage 0's
// p micro-batches), else a ready B, else a pending W. The weight halves so
// fill the slots 1F1B leaves idle, and for m >= p every stage finishes
// within 3m + p - 1 slots, the bubble of (p-1)/(3m+p-1), holding at most
// p micro-batches' contexts. The order of `stage` is returned.
inline std::vector<PipeWork> zero_bubble_order(int32_t p, int32_t m, int32_t stage) {
  const auto n = static_cast<size_t>(p);
  std::vector<int32_t> fwd(n, 0);
  std::vector<int32_t> bwd(n, 0);
  std::vector<int32_t> wgt(n, 0);
  // The slot after which F / B of (stage, micro) is done; -1: not yet.
  std::vector<int64_t> f_done(n * static_cast<size_t>(m), -1);
  std::vector<int64_t> b_done(n * static_cast<size_t>(m), -1);
  const auto at = [&](int32_t s, int32_t i) {
    return static_cast<size_t>(s) * static_cast<size_t>(m) + static_cast<size_t>(i);
  };
  const auto ready = [](int64_t done, int64_t t) { return done >= 0 && done <= t; };
  std::vector<PipeWork> order;
  // A stage's 3m slots of work end within 3m + 2(p-1) slots; 3mp + p
  // bounds the simulation generously.
  const int64_t bound = 3 * static_cast<int64_t>(m) * p + p;
  for (int64_t t = 0; wgt[static_cast<size_t>(stage)] < m; ++t) {
    TESSERA_CHECK(t <= bound, TESSERA_ERR_INTERNAL, "pipeline: the zb1 schedule of stage ", stage,
                  " does not finish for ", p, " stages and ", m, " micro-batches");
    for (int32_t s = 0; s < p; ++s) {
      const auto k = static_cast<size_t>(s);
      const int32_t b = bwd[k];
      const int32_t f = fwd[k];
      const bool b_ready =
          b < f && (s == p - 1 ? ready(f_done[at(s, b)], t) : ready(b_done[at(s + 1, b)], t));
      const bool f_ready =
          f < m && (s == 0 || ready(f_done[at(s - 1, f)], t)) && f - b < p - s && f - wgt[k] < p;
      if (f_ready) {
        f_done[at(s, f)] = t + 1;
        ++fwd[k];
        if (s == stage) order.push_back({true, 0, f, false});
      } else if (b_ready) {
        b_done[at(s, b)] = t + 1;
        ++bwd[k];
        if (s == stage) order.push_back({false, 0, b, false});
      } else if (wgt[k] < bwd[k]) {
        if (s == stage) order.push_back({false, 0, wgt[k], true});
        ++wgt[k];
      }
    }
  }
  return order;
}

// The order in which stage `stage` runs its work for `m` micro-batches.
inline std::vector<PipeWork> work_order(const PipelineOptions& o, int32_t stage, int32_t m) {
  const int32_t p = o.stages;
  const int32_t v = o.virtual_stages;
  std::vector<PipeWork> order;
  if (o.schedule == PipelineSchedule::kGpipe) {
    for (int32_t i = 0; i < m; ++i) order.push_back({true, 0, i});
    for (int32_t i = 0; i < m; ++i) order.push_back({false, 0, i});
    return order;
  }
  if (o.schedule == PipelineSchedule::kOneFOneB) {
    const int32_t warmup = std::min(p - stage - 1, m);
    for (int32_t i = 0; i < warmup; ++i) order.push_back({true, 0, i});
    for (int32_t i = 0; i < m - warmup; ++i) {
      order.push_back({true, 0, warmup + i});
      order.push_back({false, 0, i});
    }
    for (int32_t i = m - warmup; i < m; ++i) order.push_back({false, 0, i});
    return order;
  }
  if (o.schedule == PipelineSchedule::kZeroBubble) return zero_bubble_order(p, m, stage);
  // Interleaved 1F1B (Megatron-LM): the k-th forward runs micro-batch
  // (k / (p v)) p + k % p through chunk (k % (p v)) / p; the k-th backward
  // the same micro-batch through the chunks in reverse.
  const int32_t total = m * v;
  const auto item = [&](bool forward, int32_t k) {
    const int32_t in_group = k % (p * v);
    const int32_t chunk = in_group / p;
    return PipeWork{forward, forward ? chunk : v - 1 - chunk, (k / (p * v)) * p + k % p};
  };
  const int32_t warmup = m == p ? total : std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  for (int32_t k = 0; k < warmup; ++k) order.push_back(item(true, k));
  for (int32_t k = 0; k < total - warmup; ++k) {
    order.push_back(item(true, warmup + k));
    order.push_back(item(false, k));
  }
  for (int32_t k = total - warmup; k < total; ++k) order.push_back(item(false, k));
  return order;
}

inline std::span<float> part(sdk::TrackedBuffer<float>& buffer, uint64_t offset, uint64_t count) {
  return buffer.span().subspan(static_cast<size_t>(offset), static_cast<size_t>(count));
}

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU time of the calling thread: what a unit's compute costs whatever
// else shares the processor.
inline int64_t thread_cpu_ns() {
  timespec t{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return now_ns();
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// 1 - busy / span in [0, 1]; 0 without a span.
inline double idle_share(int64_t busy, double span) {
  if (span <= 0.0) return 0.0;
  return std::clamp(1.0 - static_cast<double>(busy) / span, 0.0, 1.0);
}

}  // namespace pipeline_detail

class PipelineEngine final : public sdk::Strategy {
 public:
  // Checks the options against the world size (see PipelineOptions::read).
  static void check(const sdk::Host& host, const sdk::Options& options, int32_t world_size);

  // Takes no gradient compressor (sdk::CompressorUse).
  static constexpr CompressorUse kCompressors = CompressorUse::kNone;
  // The estimate (strategy 2.3) of the `pipeline` strategy for `options`,
  // and of the engine for options already read (the `hybrid` strategy's):
  // the stage plan from the same make_plan as the run, per stage its held
  // parameters, gradients and optimizer state, its chunks' contexts times
  // the micro-batches each holds at once under the schedule (counted on
  // the schedule's own work order), and per rank and step the bytes of
  // the pipeline, data and tensor axes; memory of the largest stage,
  // traffic of the busiest. Refuses (invalid argument) what the
  // constructor or step would: more stages or chunks than units, a unit
  // that cannot split (tp > 1; the built model asked when described with
  // one) or split its backward (zb1), too few or an uneven number of
  // micro-batches for 1f1b or interleaved. docs/strategies/pipeline.md.
  static sdk::Estimate estimate(const sdk::Host& host, const sdk::Options& options,
                                const sdk::EstimateArgs& args);
  static sdk::Estimate estimate_for(const PipelineOptions& options, const sdk::EstimateArgs& args);

  // Collective: plans the stages (more stages than units, a boundary out
  // of range, zb1 with a unit that cannot split its backward, or a
  // micro-batch count the schedule cannot run, when the host says it
  // (strategy 2.9), is an invalid argument naming the option, the unit or
  // data.micro_batches), splits the world
  // into the pipeline, data-parallel and tied-parameter groups, and
  // allocates this stage's parameters, gradients and optimizer state. Rank
  // 0 logs every stage's units and share of the cost.
  PipelineEngine(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env);
  // The same from options already read (the `hybrid` strategy's, with a
  // tensor axis: options.tp ranks per tensor group inside every stage;
  // the world is data-parallel replicas x stages x tp, tp innermost).
  PipelineEngine(const sdk::Host& host, PipelineOptions options, sdk::StrategyEnv& env);
  PipelineEngine(const PipelineEngine&) = delete;
  PipelineEngine& operator=(const PipelineEngine&) = delete;
  // Waits for the messages in flight; the slots report their activation
  // bytes as freed.
  ~PipelineEngine() override;

  // Stages of one replica share a data rank (they train on the same examples).
  [[nodiscard]] tessera_strategy_layout layout() const override;
  // Reads this stage's parameters (and tied copies) and optimizer state.
  void load(const sdk::StateReader& reader) override;
  // Runs the schedule over the micro-batches, then reduces, clips and
  // updates. 1f1b with fewer micro-batches than stages, or interleaved with
  // micro-batches not a multiple of stages, is an invalid argument naming
  // data.micro_batches, raised before any compute (and already by the
  // constructor when the host said the count).
  sdk::StepResult step(const sdk::StepArgs& args) override;
  // Replica 0 writes its stage's own tensors (every rank everything it
  // holds, tied copies included, when the writer wants all replicas).
  void save(const sdk::StateWriter& writer) override;

 private:
  // A micro-batch in flight: its units' contexts and its messages.
  struct Slot {
    sdk::UnitContexts units;   // the chunk's units' contexts (reported as ACTIVATIONS)
    std::vector<float> input;  // activations received from the previous stage
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
  // The gradients reduce-scattered over the replicas (ZeRO-2 on the data
  // axis).
  [[nodiscard]] bool sharded_grads() const noexcept {
    return options_.shard_gradients && slice_ != total_;
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
  void add_slot(Chunk& chunk);
  // A free slot of `chunk` for `micro` (a new one when none is free), and
  // the slot `micro` holds; release hands it back after the last half of
  // the micro-batch's backward.
  Slot& take_slot(Chunk& chunk, int32_t micro);
  Slot& slot_of(Chunk& chunk, int32_t micro);
  static void release_slot(Chunk& chunk, int32_t micro);
  // Refuses `micro` micro-batches per step where the schedule of `o`
  // cannot run them (1f1b: fewer than stages; interleaved: not a multiple
  // of stages), naming data.micro_batches.
  static void check_micro_batches(const PipelineOptions& o, int64_t micro);
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

inline void PipelineEngine::check(const sdk::Host& /*host*/, const sdk::Options& options,
                                  int32_t world_size) {
  (void)PipelineOptions::read(options, world_size);
}

inline sdk::Estimate PipelineEngine::estimate(const sdk::Host& /*host*/,
                                              const sdk::Options& options,
                                              const sdk::EstimateArgs& args) {
  return estimate_for(PipelineOptions::read(options, args.world_size), args);
}

inline sdk::Estimate PipelineEngine::estimate_for(const PipelineOptions& o,
                                                  const sdk::EstimateArgs& args) {
  namespace pe = sdk::parallel_estimate;
  const sdk::ModelDesc& model = args.model;
  const int32_t units = model.num_units();
  const int32_t p = o.stages;
  const int32_t t = o.tp;
  const int32_t world = args.world_size;
  const int32_t r = std::max(world / std::max(p * t, 1), 1);
  const auto m = static_cast<int32_t>(model.micro_batches());
  pe::require_tensor_parallel(model, t, o.sequence, o.who, "tp");
  if (o.schedule == PipelineSchedule::kZeroBubble) {
    for (int32_t u = 0; u < units; ++u) {
      TESSERA_CHECK((model.unit(u).flags & TESSERA_UNIT_SPLIT_BACKWARD) != 0,
                    TESSERA_ERR_INVALID_ARGUMENT, o.who,
                    ": schedule = \"zb1\" needs every unit to split its backward into input and "
                    "weight halves, but unit ",
                    u, " (", model.unit(u).name != nullptr ? model.unit(u).name : "?",
                    ") cannot; use schedule = \"1f1b\"");
    }
  }
  check_micro_batches(o, m);
  std::vector<double> cost(static_cast<size_t>(units));
  for (int32_t u = 0; u < units; ++u) {
    cost[static_cast<size_t>(u)] = model.unit(u).forward_flops + model.unit(u).backward_flops;
  }
  const StagePlan plan = pipeline_detail::make_plan(o, units, cost);
  const int32_t chunks = plan.stages();
  const auto stage_of = [&](int32_t u) { return plan.stage_of(u) % p; };
  const int64_t micro = model.micro_examples(r);
  const int64_t slots = model.optimizer_slots();
  const int64_t out_div = o.sequence ? t : 1;
  const auto per_micro = [&](double per_example) {
    return static_cast<int64_t>(std::llround(per_example * static_cast<double>(micro)));
  };
  // A tied slot's copy is a shard when its owner's split parameters cover
  // it.
  const auto owner_of = [&](int32_t u) { return model.tied_owner(u); };
  const auto tied_held = [&](int32_t owner, int64_t tied) {
    return model.unit(owner).split_params >= tied ? tied / t : tied;
  };

  struct StageEstimate {
    std::array<int64_t, TESSERA_MEM_CATEGORY_COUNT> memory{};
    int64_t sum = 0;
    std::array<int64_t, 3> bytes{};  // pipeline, data, tensor
    std::array<int64_t, 3> messages{};
    double flops = 0.0;
  };
  std::vector<StageEstimate> stages(static_cast<size_t>(p));
  for (int32_t s = 0; s < p; ++s) {
    StageEstimate& e = stages[static_cast<size_t>(s)];
    int64_t own = 0;
    int64_t foreign = 0;
    int64_t replicated = 0;
    std::vector<int32_t> copies;  // owners of tied tensors held here as copies
    for (int32_t u = 0; u < units; ++u) {
      const tessera_unit_desc& d = model.unit(u);
      if (stage_of(u) == s) {
        own += pe::held_params(d, t);
        replicated += d.params - d.split_params;
        e.flops += (d.forward_flops + d.backward_flops) * static_cast<double>(micro) * m / t;
        // A checkpointed unit runs its forward (and its collectives) twice.
        const bool again = checkpointed_unit(o.checkpoint_every, u, plan.end(plan.stage_of(u)));
        if (again) e.flops += d.forward_flops * static_cast<double>(micro) * m / t;
        if (t > 1) {
          const pe::UnitTraffic tr = pe::unit_traffic(model, u, micro, t);
          e.bytes[2] += tr.bytes * m;
          e.messages[2] += tr.messages * m;
          if (again) {
            const pe::UnitTraffic fw = pe::forward_traffic(model, u, micro, t, o.sequence);
            e.bytes[2] += fw.bytes * m;
            e.messages[2] += fw.messages * m;
          }
        }
      }
      // A tie across stages: a copy on the user's stage, and the two
      // stages sum its gradient.
      const int32_t owner = d.tied_params > 0 ? owner_of(u) : -1;
      if (owner < 0 || stage_of(owner) == stage_of(u)) continue;
      const int64_t held = tied_held(owner, d.tied_params);
      if (stage_of(u) == s && std::find(copies.begin(), copies.end(), owner) == copies.end()) {
        copies.push_back(owner);
        foreign += held;
      }
      if (stage_of(u) == s || stage_of(owner) == s) {
        e.bytes[0] += pe::allreduce(4 * held, 2);
        e.messages[0] += 1;
      }
    }
    const int64_t total = own + foreign;
    const int64_t slice = o.shard_optimizer && r > 1 ? (total + r - 1) / r : total;
    const bool sharded_grads = o.shard_gradients && slice != total;
    e.memory[TESSERA_MEM_PARAMS] = 4 * (slice == total ? total : slice * r);
    e.memory[TESSERA_MEM_GRADS] = 4 * (sharded_grads ? slice * r : total);
    e.memory[TESSERA_MEM_OPTIMIZER] = 4 * slots * slice;
    // Contexts: per local chunk, as many micro-batches as the schedule
    // holds at once (slots are kept between steps), each holding what its
    // chunk keeps (all its contexts without checkpointing); with
    // checkpointing, the recomputed contexts on top: one at a time, or
    // under zb1 every checkpointed context of each micro-batch between its
    // input and weight halves (pe::range_activations).
    const std::vector<pipeline_detail::PipeWork> order = pipeline_detail::work_order(o, s, m);
    const int32_t local_chunks = (chunks - s + p - 1) / p;
    std::vector<int32_t> live(static_cast<size_t>(local_chunks), 0);
    std::vector<int32_t> most(static_cast<size_t>(local_chunks), 0);
    std::vector<pe::RangeActivations> kept(static_cast<size_t>(local_chunks));
    for (int32_t k = 0; k < local_chunks; ++k) {
      const int32_t c = s + k * p;
      kept[static_cast<size_t>(k)] = pe::range_activations(model, plan.begin(c), plan.end(c), micro,
                                                           t, o.sequence, o.checkpoint_every);
    }
    const bool split = o.schedule == PipelineSchedule::kZeroBubble;
    int64_t open = 0;   // recomputed contexts awaiting their weight half (zb1)
    int64_t extra = 0;  // the most recomputed contexts alive at once
    for (const pipeline_detail::PipeWork& w : order) {
      auto& n = live[static_cast<size_t>(w.chunk)];
      const pe::RangeActivations& a = kept[static_cast<size_t>(w.chunk)];
      if (w.forward) {
        ++n;
        most[static_cast<size_t>(w.chunk)] = std::max(most[static_cast<size_t>(w.chunk)], n);
        extra = std::max(extra, open + a.recompute);
      } else if (!split) {
        --n;
        extra = std::max(extra, a.recompute);
      } else if (!w.weight) {
        open += a.checkpointed;
        extra = std::max(extra, open);
      } else {
        --n;
        open -= a.checkpointed;
      }
    }
    e.memory[TESSERA_MEM_ACTIVATIONS] += extra;
    for (int32_t k = 0; k < local_chunks; ++k) {
      const int32_t c = s + k * p;
      e.memory[TESSERA_MEM_ACTIVATIONS] +=
          most[static_cast<size_t>(k)] * kept[static_cast<size_t>(k)].held;
      // Activations to the next chunk and their gradient back, with the
      // shape (3 x int64) and the clock (int64) sent alongside.
      if (c < chunks - 1) {
        const int64_t act = per_micro(model.unit(plan.end(c) - 1).output_bytes) / out_div;
        e.bytes[0] += m * (act + 24);
        e.messages[0] += 2 * static_cast<int64_t>(m);
        // A send the next stage has not asked for yet waits in a copy
        // (the in-memory backend's mailbox counts it as communication
        // memory): one activation message per boundary, typically, up to
        // m when the sender runs ahead.
        e.memory[TESSERA_MEM_COMM] += act + 24;
      }
      if (c > 0) {
        const int64_t grad = per_micro(model.unit(plan.begin(c) - 1).output_bytes) / out_div;
        e.bytes[0] += m * (grad + 8);
        e.messages[0] += 2 * static_cast<int64_t>(m);
        // The gradient back waits in a copy the same way when the previous
        // stage has not asked for it yet (it is busy with another
        // micro-batch): one message per boundary.
        e.memory[TESSERA_MEM_COMM] += grad + 8;
      }
    }
    for (const int64_t b : e.memory) e.sum += b;
    // The longest span (2 doubles) over the pipeline, the norm (a double).
    e.bytes[0] += pe::allreduce(16, p);
    e.messages[0] += p > 1 ? 1 : 0;
    if (sharded_grads) {
      e.bytes[1] += pe::allreduce(8, world);
      e.messages[1] += 1;
    } else if (t == 1) {
      e.bytes[0] += pe::allreduce(8, p);
      e.messages[0] += p > 1 ? 1 : 0;
    } else {
      e.bytes[2] += pe::allreduce(8, static_cast<int64_t>(p) * t);
      e.messages[2] += 1;
    }
    if (o.sequence && t > 1) {
      // Replicated gradients (each rank's rows' part) summed over the group.
      e.bytes[2] += pe::allreduce(4 * replicated, t);
      e.messages[2] += 1;
    }
    if (r > 1) {
      if (sharded_grads) {
        e.bytes[1] += (r - 1) * (4 * slice * r) / r;  // reduce-scatter
        e.messages[1] += 1;
      } else {
        for (int32_t u = 0; u < units; ++u) {
          const int64_t held = pe::held_params(model.unit(u), t);
          if (stage_of(u) != s || held == 0) continue;
          e.bytes[1] += pe::allreduce(4 * held, r);
          e.messages[1] += 1;
        }
        if (foreign > 0) {
          e.bytes[1] += pe::allreduce(4 * foreign, r);
          e.messages[1] += 1;
        }
      }
      if (slice != total) {
        e.bytes[1] += (r - 1) * (4 * slice * r) / r;  // allgather of the updated slices
        e.messages[1] += 1;
      }
    }
  }
  const auto largest = std::max_element(
      stages.begin(), stages.end(),
      [](const StageEstimate& a, const StageEstimate& b) { return a.sum < b.sum; });
  const auto sent = [](const StageEstimate& e) { return e.bytes[0] + e.bytes[1] + e.bytes[2]; };
  const auto busiest = std::max_element(
      stages.begin(), stages.end(),
      [&](const StageEstimate& a, const StageEstimate& b) { return sent(a) < sent(b); });
  sdk::Estimate out;
  out.data_size = r;
  out.memory = largest->memory;
  out.memory_total = largest->sum;
  if (r > 1) out.add_traffic("data", r, busiest->bytes[1], busiest->messages[1]);
  if (p > 1) out.add_traffic("pipeline", p, busiest->bytes[0], busiest->messages[0]);
  if (t > 1) out.add_traffic("tensor", t, busiest->bytes[2], busiest->messages[2]);
  for (const StageEstimate& e : stages) out.compute_flops = std::max(out.compute_flops, e.flops);
  out.bubble = o.bubble_formula(m);
  return out;
}

inline PipelineEngine::PipelineEngine(const sdk::Host& host, const sdk::Options& options,
                                      sdk::StrategyEnv& env)
    : PipelineEngine(host, PipelineOptions::read(options, env.world_size()), env) {}

inline PipelineEngine::PipelineEngine(const sdk::Host& host, PipelineOptions options,
                                      sdk::StrategyEnv& env)
    : host_(host),
      env_(env),
      options_(std::move(options)),
      mesh_({{"dp", env.world_size() / (options_.stages * options_.tp)},
             {"pp", options_.stages},
             {"tp", options_.tp}},
            env.world_size(), env.rank()),
      stages_(mesh_.size("pp")),
      replicas_(mesh_.size("dp")),
      stage_(mesh_.coord("pp")),
      replica_(mesh_.coord("dp")),
      tp_rank_(mesh_.coord("tp")),
      plan_(pipeline_detail::make_plan(options_, env.model())),
      flat_(env.model()),
      param_ptrs_(flat_),
      grad_ptrs_(flat_) {
  // With a tensor axis, the units must split and the model must accept the
  // group before any parameter is cut (naming its key and the option).
  sdk::require_tensor_parallel(env.model(), options_.tp, group_flags(), options_.who, "tp");
  if (env.micro_batches() > 0) check_micro_batches(options_, env.micro_batches());
  for (int32_t c = stage_; c < plan_.stages(); c += stages_) {
    Chunk chunk;
    chunk.index = c;
    chunk.first_unit = plan_.begin(c);
    chunk.end_unit = plan_.end(c);
    chunk.own = {flat_.unit_range(chunk.first_unit).begin,
                 flat_.unit_range(chunk.end_unit - 1).end};
    chunks_.push_back(std::move(chunk));
  }
  // The held buffers: this stage's own tensors in model order (so each
  // unit's are contiguous, for its data-parallel sum), then the copies of
  // tied tensors owned by other stages; each a tensor-parallel shard or
  // whole (sdk::TensorShards).
  std::vector<size_t> order;
  for (size_t i = 0; i < flat_.entries().size(); ++i) {
    if (owns_unit(flat_.entry(i).unit)) order.push_back(i);
  }
  own_count_ = order.size();
  for (size_t i = 0; i < flat_.entries().size(); ++i) {
    const sdk::FlatEntry& e = flat_.entry(i);
    const bool used =
        std::any_of(e.users.begin(), e.users.end(), [&](int32_t u) { return owns_unit(u); });
    if (!owns_unit(e.unit) && used) {
      foreign_.push_back(i);
      order.push_back(i);
    }
  }
  shards_ = sdk::TensorShards(flat_, env.model(), options_.tp, tp_rank_, options_.who, {}, order);
  own_total_ = foreign_.empty() ? shards_.total() : shards_.held(foreign_.front()).at;
  total_ = shards_.total();
  // Each unit's held range (its own tensors, contiguous).
  unit_held_.assign(static_cast<size_t>(env.model().num_units()), sdk::FlatRange{});
  for (size_t k = 0; k < own_count_; ++k) {
    const sdk::TensorShards::Held& h = shards_.held(order[k]);
    sdk::FlatRange& r = unit_held_[static_cast<size_t>(flat_.entry(order[k]).unit)];
    if (r.empty()) r.begin = h.at;
    r.end = h.at + h.numel;
  }
  for (Chunk& chunk : chunks_) {
    chunk.at = unit_held_[static_cast<size_t>(chunk.first_unit)].begin;
    for (int32_t u = chunk.first_unit; u < chunk.end_unit; ++u) {
      const sdk::FlatRange& r = unit_held_[static_cast<size_t>(u)];
      if (!r.empty()) {
        chunk.at = std::min(chunk.at, r.begin);
        break;
      }
    }
  }
  // With the optimizer state sharded over the replicas, replica r updates
  // the held elements [r·slice, (r+1)·slice) (the buffers padded to
  // replicas x slice for the allgather).
  slice_ = total_;
  if (options_.shard_optimizer && replicas_ > 1) {
    slice_ = (total_ + static_cast<uint64_t>(replicas_) - 1) / static_cast<uint64_t>(replicas_);
  }
  slice_at_ = slice_ == total_ ? 0 : slice_ * static_cast<uint64_t>(replica_);
  params_ = sdk::TrackedBuffer<float>(
      host, env.rank(), TESSERA_MEM_PARAMS,
      static_cast<size_t>(slice_ == total_ ? total_ : slice_ * static_cast<uint64_t>(replicas_)));
  grads_ = sdk::TrackedBuffer<float>(
      host, env.rank(), TESSERA_MEM_GRADS,
      static_cast<size_t>(sharded_grads() ? slice_ * static_cast<uint64_t>(replicas_) : total_));
  for (const size_t i : order) {
    param_ptrs_.bind_entry(i, params_.data() + shards_.held(i).at);
    grad_ptrs_.bind_entry(i, grads_.data() + shards_.held(i).at);
  }
  optim_ = env.optimizer().make_state(slice_);

  // Groups: the stages of one replica (rank in it = stage), one stage over
  // all replicas, and per parameter used on several stages those stages.
  pipe_ = mesh_.group(env.world(), {"pp"});
  dp_ = mesh_.group(env.world(), {"dp"});
  if (options_.tp > 1) {
    tp_ = mesh_.group(env.world(), {"tp"});
    norm_group_ = mesh_.group(env.world(), {"pp", "tp"});
    group_ = std::make_unique<sdk::TensorGroup>(*tp_, group_flags());
  }
  for (size_t i = 0; i < flat_.entries().size(); ++i) {
    const sdk::FlatEntry& e = flat_.entry(i);
    std::vector<int32_t> stages;
    for (const int32_t u : e.users) stages.push_back(plan_.stage_of(u) % stages_);
    std::sort(stages.begin(), stages.end());
    stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
    if (stages.size() < 2) continue;
    const bool mine = std::find(stages.begin(), stages.end(), stage_) != stages.end();
    auto comm = pipe_->split(mine ? 0 : -1, stage_);
    if (mine) tied_.push_back(TiedGroup{i, std::move(comm)});
  }

  // A unit's gradients are complete once every unit of this stage that
  // uses its parameters has run its last gradient pass of the step.
  const auto units = static_cast<size_t>(env.model().num_units());
  users_left_init_.assign(units, 0);
  completes_.assign(units, {});
  for (const sdk::FlatEntry& e : flat_.entries()) {
    if (!owns_unit(e.unit)) continue;
    for (const int32_t u : e.users) {
      std::vector<int32_t>& done = completes_[static_cast<size_t>(u)];
      if (!owns_unit(u) || std::find(done.begin(), done.end(), e.unit) != done.end()) continue;
      done.push_back(e.unit);
      ++users_left_init_[static_cast<size_t>(e.unit)];
    }
  }

  if (options_.schedule == PipelineSchedule::kZeroBubble) {
    const sdk::ModelView& model = env.model();
    for (int32_t u = 0; u < model.num_units(); ++u) {
      if ((model.unit_flags(u) & TESSERA_UNIT_SPLIT_BACKWARD) == 0) {
        throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                    ::tessera::detail::concat(options_.who,
                                              ": schedule = \"zb1\" needs every unit to split its "
                                              "backward into input and weight halves, but unit ",
                                              u, " (", model.unit_name(u),
                                              ") cannot; use schedule = \"1f1b\""));
      }
    }
  }
  if (env.rank() == 0) log_plan(env.model());
}

inline PipelineEngine::~PipelineEngine() { drop_pending(); }

inline bool PipelineEngine::owns_unit(int32_t unit) const {
  return plan_.stage_of(unit) % stages_ == stage_;
}

inline void PipelineEngine::add_slot(Chunk& chunk) {
  Slot s;
  s.units = sdk::UnitContexts(host_, env_.model(), env_.rank(), chunk.first_unit, chunk.end_unit,
                              options_.checkpoint_every);
  chunk.slots.push_back(std::move(s));
}

inline PipelineEngine::Slot& PipelineEngine::take_slot(Chunk& chunk, int32_t micro) {
  if (chunk.free_slots.empty()) {
    add_slot(chunk);
    chunk.free_slots.push_back(static_cast<int32_t>(chunk.slots.size()) - 1);
  }
  const int32_t index = chunk.free_slots.back();
  chunk.free_slots.pop_back();
  chunk.slot_of[static_cast<size_t>(micro)] = index;
  return chunk.slots[static_cast<size_t>(index)];
}

inline PipelineEngine::Slot& PipelineEngine::slot_of(Chunk& chunk, int32_t micro) {
  return chunk.slots[static_cast<size_t>(chunk.slot_of[static_cast<size_t>(micro)])];
}

inline void PipelineEngine::release_slot(Chunk& chunk, int32_t micro) {
  chunk.free_slots.push_back(chunk.slot_of[static_cast<size_t>(micro)]);
  chunk.slot_of[static_cast<size_t>(micro)] = -1;
}

inline tessera_strategy_layout PipelineEngine::layout() const {
  tessera_strategy_layout l{};
  l.struct_size = sizeof l;
  l.data_rank = replica_;
  l.data_size = replicas_;
  return l;
}

inline uint64_t PipelineEngine::offset_of(size_t entry) const {
  const sdk::TensorShards::Held& h = shards_.held(entry);
  TESSERA_CHECK(h.held, TESSERA_ERR_INTERNAL, "pipeline: parameter ", flat_.entry(entry).full_name,
                " is not held by stage ", stage_);
  return h.at;
}

inline void PipelineEngine::log_plan(const sdk::ModelView& model) const {
  std::vector<double> cost;
  double total = 0.0;
  for (int32_t u = 0; u < model.num_units(); ++u) {
    const tessera_unit_cost c = model.unit_cost(u);
    cost.push_back(c.forward_flops + c.backward_flops);
    total += cost.back();
  }
  if (std::string(options_.who) != "pipeline") {
    host_.info(options_.who, ": mesh ", mesh_.describe(), ", mode ",
               options_.sequence ? "sequence" : "tensor");
    for (const char* axis : {"tp", "pp", "dp"})
      host_.info(options_.who, ": ", mesh_.describe_groups({axis}));
  }
  host_.info(options_.who, ": ", stages_, " stages x ", replicas_,
             " data-parallel replicas, schedule ", options_.schedule_name(), ", partition ",
             options_.explicit_partition ? "explicit" : "balanced");
  for (int32_t s = 0; s < plan_.stages(); ++s) {
    std::string names;
    double c = 0.0;
    for (int32_t u = plan_.begin(s); u < plan_.end(s); ++u) {
      if (!names.empty()) names += ", ";
      names += model.unit_name(u);
      c += cost[static_cast<size_t>(u)];
    }
    char share[32];
    std::snprintf(share, sizeof share, "%.1f%%", total > 0.0 ? 100.0 * c / total : 0.0);
    const std::string chunk = options_.virtual_stages > 1
                                  ? ::tessera::detail::concat(" chunk ", s / stages_)
                                  : std::string();
    host_.info(options_.who, ": stage ", s % stages_, chunk, " owns units ", plan_.begin(s), "..",
               plan_.end(s) - 1, " (", names, "), ", share, " of the cost");
  }
}

inline void PipelineEngine::load(const sdk::StateReader& reader) {
  // Own tensors and tied copies alike, shards as boxes of the whole tensors.
  if (slice_ == total_) {
    shards_.read(reader, flat_, env_.optimizer(), params_.span(), optim_);
    return;
  }
  shards_.read_params(reader, flat_, params_.span());
  if (!sdk::has_optimizer_state(reader, flat_, env_.optimizer())) return;
  for_each_optimizer_piece(
      {}, [&](const std::string& name, const std::vector<int64_t>& shape, uint64_t whole,
              std::span<float> values) { reader.read(name, shape, whole, values); });
}

template <class Fn>
void PipelineEngine::for_each_optimizer_piece(const std::function<bool(size_t)>& which, Fn&& fn) {
  // The pieces of this replica's slice [slice_at_, slice_at_ + slice_) of
  // the held buffer, tensor by tensor, as element ranges of the whole
  // tensors; each optimizer slot's values at the same place of its state.
  const sdk::OptimizerView& opt = env_.optimizer();
  const uint64_t hi = std::min(total_, slice_at_ + slice_);
  for (size_t i = 0; i < shards_.entries(); ++i) {
    const sdk::TensorShards::Held& h = shards_.held(i);
    if (!h.held || (which && !which(i))) continue;
    const uint64_t lo = std::max(h.at, slice_at_);
    const uint64_t end = std::min(h.at + h.numel, hi);
    if (lo >= end) continue;
    const sdk::FlatEntry& e = flat_.entry(i);
    shards_.for_each_piece(flat_, i, lo - h.at, end - h.at,
                           [&](uint64_t whole, uint64_t local, uint64_t count) {
                             const uint64_t at = h.at + local - slice_at_;
                             for (int32_t k = 0; k < opt.num_slots(); ++k) {
                               fn(sdk::optim_key(e.full_name, opt.slot_name(k)), e.shape, whole,
                                  optim_.slot(k).subspan(at, count));
                             }
                           });
  }
}

inline void PipelineEngine::save(const sdk::StateWriter& writer) {
  // Replica 0 writes its stage's own tensors (a replicated one from tensor
  // rank 0); every rank everything it holds when the writer wants all.
  const bool all = writer.all_replicas();
  const auto own = [&](size_t entry) { return all || owns_unit(flat_.entry(entry).unit); };
  if (slice_ == total_) {
    if (replica_ != 0 && !all) return;
    shards_.write(writer, flat_, env_.optimizer(), params_.span(), optim_, tp_rank_ == 0 || all,
                  own);
    return;
  }
  // The optimizer state sharded over the replicas: replica 0 writes the
  // parameters, every replica its slice of the optimizer state (of a
  // replicated tensor, from tensor rank 0).
  if (replica_ == 0 || all)
    shards_.write_params(writer, flat_, params_.span(), tp_rank_ == 0 || all, own);
  for_each_optimizer_piece(
      [&](size_t entry) {
        return own(entry) && (all || tp_rank_ == 0 || shards_.held(entry).split);
      },
      [&](const std::string& name, const std::vector<int64_t>& shape, uint64_t whole,
          std::span<float> values) { writer.write(name, shape, whole, values); });
}

inline void PipelineEngine::check_micro_batches(const PipelineOptions& o, int64_t micro) {
  // Thrown without a source location: the message is the whole refusal.
  if (o.schedule == PipelineSchedule::kOneFOneB && micro < o.stages) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                ::tessera::detail::concat(
                    o.who, ": schedule = \"1f1b\" needs data.micro_batches >= ", o.stages_key, " (",
                    o.stages, "), but a step has ", micro,
                    " micro-batches; raise data.micro_batches or use schedule = \"gpipe\""));
  }
  if (o.schedule == PipelineSchedule::kInterleaved && micro % o.stages != 0) {
    throw Error(
        TESSERA_ERR_INVALID_ARGUMENT,
        ::tessera::detail::concat(o.who,
                                  ": schedule = \"interleaved\" needs data.micro_batches to be a "
                                  "multiple of ",
                                  o.stages_key, " (", o.stages,
                                  "), as Megatron-LM's interleaved schedule does, but a step has ",
                                  micro, " micro-batches"));
  }
}

inline sdk::StepResult PipelineEngine::step(const sdk::StepArgs& args) {
  const auto micro = static_cast<int32_t>(args.micro_batches.size());
  check_micro_batches(options_, micro);
  // run_step meters the fixed communicators; the tied groups are added here.
  sdk::StepResult tied_before;
  for (TiedGroup& t : tied_) {
    tied_before.comm_wait_ns += t.comm->stats().wait_ns;
    tied_before.comm_bytes += t.comm->stats().bytes_sent;
  }
  const int64_t units_bytes = group_ != nullptr ? group_->bytes_sent() : 0;
  const int64_t units_wait = group_ != nullptr ? group_->wait_ns() : 0;
  const sdk::CommStats pipe_before = pipe_->stats();
  const sdk::CommStats dp_before = dp_->stats();
  const sdk::CommStats tp_before = tp_ != nullptr ? tp_->stats() : sdk::CommStats{};
  std::array<double, 2> spans{};
  sdk::StepResult result = sdk::run_step(
      args, {&env_.world(), pipe_.get(), dp_.get(), tp_.get(), norm_group_.get()},
      {.zero_grads = [&] { grads_.zero(); },
       .forward_backward = [&] { return run_schedule(args); },
       .finish =
           [&] {
             reduce_grads();
             spans = longest_spans();
           },
       .abandon = [&] { drop_pending(); },
       .sum_squares = [&] { return sum_squares(); },
       .update =
           [&](float factor) {
             host_.scale(grads_.span(), factor);
             if (slice_ == total_) {
               env_.optimizer().step(optim_, 0, params_.span(), grads_.span(), args.step, args.lr);
               return;
             }
             // This replica's slice, then every replica's into every rank.
             const uint64_t n = std::min(slice_, total_ - std::min(total_, slice_at_));
             env_.optimizer().step(optim_, 0, pipeline_detail::part(params_, slice_at_, n),
                                   pipeline_detail::part(grads_, slice_at_, n), args.step, args.lr);
             const std::vector<float> mine(params_.data() + slice_at_,
                                           params_.data() + slice_at_ + slice_);
             dp_->allgather(std::span<const float>(mine), params_.span());
           }});
  for (TiedGroup& t : tied_) {
    result.comm_wait_ns += t.comm->stats().wait_ns;
    result.comm_bytes += t.comm->stats().bytes_sent;
  }
  result.comm_wait_ns -= tied_before.comm_wait_ns;
  result.comm_bytes -= tied_before.comm_bytes;
  if (group_ != nullptr) {
    // The units' own collectives in the tensor group, and the bytes per
    // axis (the tied groups and the norm's are counted with the pipeline).
    const int64_t units = group_->bytes_sent() - units_bytes;
    result.comm_bytes += units;
    result.comm_wait_ns += group_->wait_ns() - units_wait;
    host_.debug(options_.who, ": step ", args.step, " rank ", env_.rank(), ": tp group sent ",
                units + tp_->stats().bytes_sent - tp_before.bytes_sent, " bytes (units ", units,
                "), pp group ", pipe_->stats().bytes_sent - pipe_before.bytes_sent,
                " bytes, dp group ", dp_->stats().bytes_sent - dp_before.bytes_sent, " bytes");
  }
  result.bubble = pipeline_detail::idle_share(busy_ns_, spans[0]);
  result.bubble_cpu = pipeline_detail::idle_share(cpu_ns_, spans[1]);
  char line[160];
  std::snprintf(
      line, sizeof line, "wall %.2f of %.2f ms busy, CPU clock %.2f of %.2f ms busy (ends at %.2f)",
      static_cast<double>(busy_ns_) * 1e-6, spans[0] * 1e-6, static_cast<double>(cpu_ns_) * 1e-6,
      spans[1] * 1e-6, static_cast<double>(clock_ns_) * 1e-6);
  host_.debug(options_.who, ": step ", args.step, " stage ", stage_, " replica ", replica_, ": ",
              line);
  result.bubble_formula = options_.bubble_formula(micro);
  return result;
}

template <class Work>
void PipelineEngine::compute(Work&& work) {
  const int64_t wall = pipeline_detail::now_ns();
  const int64_t cpu = pipeline_detail::thread_cpu_ns();
  std::forward<Work>(work)();
  const int64_t used = pipeline_detail::thread_cpu_ns() - cpu;
  busy_ns_ += pipeline_detail::now_ns() - wall;
  cpu_ns_ += used;
  clock_ns_ += used;
}

inline void PipelineEngine::arrive(int64_t sender_clock) noexcept {
  clock_ns_ = std::max(clock_ns_, sender_clock);
}

inline std::array<double, 2> PipelineEngine::longest_spans() {
  std::array<double, 2> spans{static_cast<double>(span_ns_), static_cast<double>(clock_ns_)};
  if (pipe_->size() > 1) pipe_->allreduce(std::span<double>(spans), TESSERA_MAX);
  return spans;
}

inline void PipelineEngine::unit_done(int32_t unit) {
  if (dp_->size() <= 1 || sharded_grads()) return;  // sharded: one reduce-scatter at the end
  for (const int32_t u : completes_[static_cast<size_t>(unit)]) {
    if (--users_left_[static_cast<size_t>(u)] != 0) continue;
    TESSERA_CHECK(owns_unit(u), TESSERA_ERR_INTERNAL, "pipeline: unit ", u, " is not on stage ",
                  stage_);
    const sdk::FlatRange range = unit_held_[static_cast<size_t>(u)];
    if (range.empty()) continue;
    dp_sums_.push_back(
        dp_->start_allreduce(pipeline_detail::part(grads_, range.begin, range.size())));
  }
}

inline double PipelineEngine::run_schedule(const sdk::StepArgs& args) {
  const auto m = static_cast<int32_t>(args.micro_batches.size());
  const int64_t start = pipeline_detail::now_ns();
  busy_ns_ = 0;
  cpu_ns_ = 0;
  clock_ns_ = 0;
  users_left_ = users_left_init_;
  dp_sums_.clear();
  for (Chunk& chunk : chunks_) {
    // Slots are taken by forwards and released after the backward (zb1:
    // its weight half), so a chunk holds as many as it has micro-batches
    // in flight: m under gpipe, p - s under 1f1b.
    chunk.slot_of.assign(static_cast<size_t>(m), -1);
    chunk.free_slots.clear();
    for (auto i = static_cast<int32_t>(chunk.slots.size()); i > 0; --i) {
      chunk.free_slots.push_back(i - 1);
    }
    // The shapes of every micro-batch's input activations, received ahead.
    chunk.shape_recvs.clear();
    if (chunk.index == 0) continue;
    chunk.shapes.assign(3 * static_cast<size_t>(m), 0);
    const int32_t from = (stage_ + stages_ - 1) % stages_;
    for (int32_t i = 0; i < m; ++i) {
      chunk.shape_recvs.push_back(
          pipe_->start_recv(std::span<int64_t>(chunk.shapes).subspan(3 * static_cast<size_t>(i), 3),
                            from, pipeline_detail::tag(pipeline_detail::kTagShape, chunk.index)));
    }
  }
  double loss = 0.0;
  for (const pipeline_detail::PipeWork& w : pipeline_detail::work_order(options_, stage_, m)) {
    Chunk& chunk = chunks_[static_cast<size_t>(w.chunk)];
    if (w.forward) {
      forward(args, chunk, w.micro, loss);
    } else if (w.weight) {
      backward_weight(chunk, w.micro);
    } else {
      backward(chunk, w.micro);
    }
  }
  for (Chunk& chunk : chunks_) {
    for (Slot& s : chunk.slots) wait_sends(s);
  }
  span_ns_ = pipeline_detail::now_ns() - start;
  return loss;
}

inline void PipelineEngine::forward(const sdk::StepArgs& args, Chunk& chunk, int32_t micro,
                                    double& loss) {
  Slot& slot = take_slot(chunk, micro);
  tessera_matrix x{};
  wait_sends(slot);  // the contexts' last outputs have left
  if (chunk.index > 0) {
    chunk.shape_recvs[static_cast<size_t>(micro)].wait(host_);
    const int64_t* shape = chunk.shapes.data() + 3 * static_cast<size_t>(micro);
    const int64_t rows = shape[0];
    const int64_t cols = shape[1];
    slot.input.resize(static_cast<size_t>(rows * cols));
    pipe_->recv(std::span<float>(slot.input), (stage_ + stages_ - 1) % stages_,
                pipeline_detail::tag(pipeline_detail::kTagActivations, chunk.index));
    arrive(shape[2]);
    slot.input_shape = {rows, cols};
    x = tessera_matrix{slot.input.data(), rows, cols};
  }
  const tessera_batch* batch = args.micro_batches[static_cast<size_t>(micro)];
  const float scale = args.loss_scales[static_cast<size_t>(micro)];
  compute([&] {
    for (int32_t u = chunk.first_unit; u < chunk.end_unit; ++u) {
      x = slot.units.forward(u, param_ptrs_.unit_const(u), batch, x, scale, units_group());
    }
  });
  if (chunk.index == plan_.stages() - 1) {
    TESSERA_CHECK(x.data != nullptr && x.rows * x.cols == 1, TESSERA_ERR_INTERNAL,
                  "pipeline: the last unit returned a ", x.rows, "x", x.cols,
                  " output, not the 1x1 loss");
    // Every rank of a tensor group computed the whole loss; the host sums
    // the ranks' losses, so tensor rank 0 reports it.
    if (tp_rank_ == 0) loss += static_cast<double>(x.data[0]);
    return;
  }
  const int32_t next = (stage_ + 1) % stages_;
  const int32_t boundary = chunk.index + 1;
  slot.out_shape = {x.rows, x.cols, clock_ns_};
  const auto n = static_cast<size_t>(x.rows * x.cols);
  slot.sends.push_back(
      pipe_->start_send(std::span<const int64_t>(slot.out_shape), next,
                        pipeline_detail::tag(pipeline_detail::kTagShape, boundary)));
  slot.sends.push_back(
      pipe_->start_send(std::span<const float>(x.data, n), next,
                        pipeline_detail::tag(pipeline_detail::kTagActivations, boundary)));
  // The gradient of these activations, received ahead of the backward.
  slot.grad.resize(n);
  slot.grad_recv =
      pipe_->start_recv(std::span<float>(slot.grad), next,
                        pipeline_detail::tag(pipeline_detail::kTagGradients, boundary));
  slot.grad_clock_recv =
      pipe_->start_recv(std::span<int64_t>(&slot.grad_clock, 1), next,
                        pipeline_detail::tag(pipeline_detail::kTagGradientClock, boundary));
}

inline void PipelineEngine::backward(Chunk& chunk, int32_t micro) {
  Slot& slot = slot_of(chunk, micro);
  tessera_matrix grad{};
  wait_sends(slot);  // the forward's output has left before the context changes
  if (chunk.index < plan_.stages() - 1) {
    slot.grad_recv.wait(host_);
    slot.grad_clock_recv.wait(host_);
    arrive(slot.grad_clock);
    grad = tessera_matrix{slot.grad.data(), slot.out_shape[0], slot.out_shape[1]};
  }
  const bool split = options_.schedule == PipelineSchedule::kZeroBubble;
  const bool last = micro + 1 == static_cast<int32_t>(chunk.slot_of.size());
  for (int32_t u = chunk.end_unit - 1; u >= chunk.first_unit; --u) {
    compute([&] {
      grad = split ? slot.units.backward_input(u, param_ptrs_.unit_const(u), grad, units_group())
                   : slot.units.backward(u, param_ptrs_.unit_const(u), grad_ptrs_.unit(u), grad,
                                         units_group());
    });
    if (!split && last) unit_done(u);
  }
  if (chunk.index > 0) {
    const auto n = static_cast<size_t>(grad.rows * grad.cols);
    const int32_t previous = (stage_ + stages_ - 1) % stages_;
    slot.sent_clock = clock_ns_;
    slot.sends.push_back(
        pipe_->start_send(std::span<const float>(grad.data, n), previous,
                          pipeline_detail::tag(pipeline_detail::kTagGradients, chunk.index)));
    slot.sends.push_back(
        pipe_->start_send(std::span<const int64_t>(&slot.sent_clock, 1), previous,
                          pipeline_detail::tag(pipeline_detail::kTagGradientClock, chunk.index)));
  }
  if (!split) release_slot(chunk, micro);  // zb1: after the weight half
}

inline void PipelineEngine::backward_weight(Chunk& chunk, int32_t micro) {
  Slot& slot = slot_of(chunk, micro);
  // The input gradient sent from the contexts has left before they change.
  wait_sends(slot);
  const bool last = micro + 1 == static_cast<int32_t>(chunk.slot_of.size());
  for (int32_t u = chunk.end_unit - 1; u >= chunk.first_unit; --u) {
    compute([&] {
      slot.units.backward_weight(u, param_ptrs_.unit_const(u), grad_ptrs_.unit(u), units_group());
    });
    if (last) unit_done(u);
  }
  release_slot(chunk, micro);
}

inline void PipelineEngine::wait_sends(Slot& slot) {
  for (sdk::PendingOp& op : slot.sends) op.wait(host_);
  slot.sends.clear();
}

inline void PipelineEngine::drop_pending() noexcept {
  // Destroying a pending operation waits for it (and drops its error).
  for (Chunk& chunk : chunks_) {
    for (Slot& s : chunk.slots) {
      s.sends.clear();
      s.grad_recv = sdk::PendingOp();
      s.grad_clock_recv = sdk::PendingOp();
    }
    chunk.shape_recvs.clear();
  }
  dp_sums_.clear();
}

inline void PipelineEngine::reduce_grads() {
  if (dp_->size() > 1 && !sharded_grads()) {
    // Every own unit's sum started after its last gradient pass; the tied
    // copies of other stages' parameters are summed here.
    for (sdk::PendingOp& op : dp_sums_) op.wait(host_);
    dp_sums_.clear();
    for (size_t u = 0; u < users_left_.size(); ++u) {
      TESSERA_CHECK(users_left_[u] == 0 || !owns_unit(static_cast<int32_t>(u)),
                    TESSERA_ERR_INTERNAL, "pipeline: unit ", u,
                    "'s gradients were not summed over the replicas");
    }
    if (total_ > own_total_)
      dp_->allreduce(pipeline_detail::part(grads_, own_total_, total_ - own_total_));
  }
  // Under sequence parallelism each tensor rank's replicated gradients
  // cover its token rows: their sum over the tensor group is the whole.
  if (options_.sequence && tp_ != nullptr) {
    for (size_t i = 0; i < shards_.entries(); ++i) {
      const sdk::TensorShards::Held& h = shards_.held(i);
      if (h.held && !h.split) tp_->allreduce(pipeline_detail::part(grads_, h.at, h.numel));
    }
  }
  for (TiedGroup& t : tied_) {
    t.comm->allreduce(
        pipeline_detail::part(grads_, offset_of(t.entry), shards_.held(t.entry).numel));
  }
  if (sharded_grads()) {
    // Every replica's sum of the slice it updates (the buffer is padded to
    // replicas x slice, the padding zero).
    std::vector<float> mine(static_cast<size_t>(slice_));
    dp_->reduce_scatter(std::span<const float>(grads_.span()), std::span<float>(mine));
    std::copy(mine.begin(), mine.end(), grads_.data() + slice_at_);
  }
}

inline double PipelineEngine::sum_squares() {
  // Each element once: this stage's own gradients (tied copies are counted
  // by their owner), summed over the stages; replicas hold the same sums.
  if (sharded_grads()) {
    // Only this replica's slice is summed: its own tensors' elements in it
    // (a replicated one's on tensor rank 0), over the whole world.
    double total = 0.0;
    const uint64_t hi = std::min(total_, slice_at_ + slice_);
    for (size_t i = 0; i < shards_.entries(); ++i) {
      const sdk::TensorShards::Held& h = shards_.held(i);
      if (!h.held || !owns_unit(flat_.entry(i).unit) || (!h.split && tp_rank_ != 0)) continue;
      const uint64_t lo = std::max(h.at, slice_at_);
      const uint64_t end = std::min(h.at + h.numel, hi);
      if (lo < end) total += host_.sum_squares(pipeline_detail::part(grads_, lo, end - lo));
    }
    env_.world().allreduce(std::span<double>(&total, 1));
    return total;
  }
  if (tp_ == nullptr) {
    double total = host_.sum_squares(pipeline_detail::part(grads_, 0, own_total_));
    if (pipe_->size() > 1) pipe_->allreduce(std::span<double>(&total, 1));
    return total;
  }
  // With a tensor axis: shards summed over the tensor group, replicated
  // tensors (the same on its every rank) counted on tensor rank 0.
  double total = 0.0;
  for (size_t i = 0; i < shards_.entries(); ++i) {
    const sdk::TensorShards::Held& h = shards_.held(i);
    if (!h.held || !owns_unit(flat_.entry(i).unit) || (!h.split && tp_rank_ != 0)) continue;
    total += host_.sum_squares(pipeline_detail::part(grads_, h.at, h.numel));
  }
  norm_group_->allreduce(std::span<double>(&total, 1));
  return total;
}

}  // namespace tessera::sdk

// The `fsdp` strategy (see fsdp_strategy.hpp).
#include "fsdp_strategy.hpp"

#include <algorithm>

#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/estimate_formulas.hpp"
#include "tessera/sdk/step_frame.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {

// The runner's callbacks. full_shard: gather before each unit's forward and
// backward (prefetching the next unit in the pass's direction) and free the
// others; shard_grad_op: gather before the forward only and keep until the
// unit's backward is done; G = 1: parameters are bound in place.
class FsdpHooks final : public sdk::RunnerHooks {
 public:
  explicit FsdpHooks(FsdpStrategy& s) : s_(s) {}
  void before_forward(int32_t unit, int32_t /*micro*/) override {
    s_.use_unit(unit, s_.next_other(unit, 1),
                s_.options_.sharding != ShardingStrategy::kShardGradOp);
  }
  void before_backward(int32_t unit, int32_t /*micro*/) override {
    s_.use_unit(unit, s_.next_other(unit, -1),
                s_.options_.sharding != ShardingStrategy::kShardGradOp);
    s_.bind_grads(unit);
  }
  void after_backward(int32_t unit, int32_t /*micro*/, bool last_micro) override {
    s_.finish_unit(unit, last_micro);
  }

 private:
  FsdpStrategy& s_;
};

void FsdpStrategy::check(const sdk::Host& /*host*/, const sdk::Options& options,
                         int32_t world_size) {
  check_world_size("fsdp", world_size);
  (void)FsdpOptions::read(options, world_size);
  (void)sdk::read_activation_checkpointing(options, "fsdp");
}

FsdpStrategy::FsdpStrategy(const sdk::Host& host, const sdk::Options& options,
                           sdk::StrategyEnv& env)
    : sdk::DataParallelStrategy(env),
      host_(host),
      env_(env),
      options_(FsdpOptions::read(options, env.world_size())),
      group_size_(options_.group_size(env.world_size())),
      codec_(sdk::GradCodec::select(env, options_.reduce_dtype, "fsdp")),
      layout_(env.model()),
      shards_(layout_, group_size_, env.rank() % group_size_,
              options_.min_params > 0
                  ? sdk::group_by_min_params(layout_, static_cast<uint64_t>(options_.min_params))
                  : std::vector<int32_t>{}),
      state_(host, shards_, env.optimizer(), env.rank()),
      param_ptrs_(layout_),
      grad_ptrs_(layout_),
      runner_(host, env.model(), env.rank(), true,
              sdk::read_activation_checkpointing(options, "fsdp")) {
  codec_.require_summable("fsdp");
  if (group_size_ == 1) {
    // Every piece is its whole unit: bind the slots in place, once.
    for (int32_t o = 0; o < shards_.num_units(); ++o) {
      shards_.bind(param_ptrs_, o, state_.param_piece(o).data());
      shards_.bind(grad_ptrs_, o, state_.grad_piece(o).data());
    }
  }
  if (env.rank() == 0) {
    host_.debug("fsdp: ", sharding_name(options_.sharding), ", ", layout_.total(),
                " parameters in ", shards_.model_units(), " model units wrapped into ",
                shards_.num_units(), " FSDP units, sharding groups of ", group_size_, " ranks, ",
                env.world_size() / group_size_, " replicas, shard of ", shards_.shard_elements(),
                " elements per rank, parameters gathered in ", dtype_name(options_.param_dtype),
                ", gradients reduced in ", dtype_name(options_.reduce_dtype));
  }
}

void FsdpStrategy::ensure_comms() {
  if (comms_ready_) return;
  sdk::CommView& world = env_.world();
  const int32_t n = env_.world_size();
  const int32_t index = env_.rank() / group_size_;  // which group
  const int32_t inner = env_.rank() % group_size_;  // position inside it
  if (group_size_ > 1 && group_size_ < n) {
    group_split_ = world.split(index, inner);
    replica_split_ = world.split(inner, index);
    TESSERA_CHECK(group_split_ != nullptr && replica_split_ != nullptr, TESSERA_ERR_INTERNAL,
                  "fsdp: rank ", env_.rank(), ": comm_split returned no communicator");
    replicas_ = replica_split_.get();
  } else if (group_size_ == 1 && n > 1) {
    replicas_ = &world;
  }
  if (group_size_ > 1) {
    gather_ = std::make_unique<sdk::UnitGather>(host_, group(), shards_, env_.rank(),
                                                options_.param_dtype);
    // hybrid_shard: each reduced piece is summed over the replicas too.
    reducer_ = std::make_unique<sdk::UnitReducer>(host_, group(), shards_, codec_, env_.rank(),
                                                  replicas_, "fsdp");
  }
  comms_ready_ = true;
}

sdk::CommView& FsdpStrategy::group() {
  return group_split_ != nullptr ? *group_split_ : env_.world();
}

int32_t FsdpStrategy::next_other(int32_t m, int32_t direction) const {
  const std::vector<int32_t>& mine = shards_.owners(m);
  for (int32_t n = m + direction; n >= 0 && n < shards_.model_units(); n += direction) {
    for (const int32_t o : shards_.owners(n)) {
      if (std::find(mine.begin(), mine.end(), o) == mine.end()) return n;
    }
  }
  return -1;
}

void FsdpStrategy::use_unit(int32_t u, int32_t next, bool free_others) {
  if (gather_ == nullptr) return;  // G = 1: bound in place
  // The next unit's FSDP units are kept when already gathered, with or
  // without prefetching, so prefetch changes only when gathers start.
  gather_->use(param_ptrs_, state_.params(), u, next, options_.prefetch, free_others);
}

void FsdpStrategy::bind_grads(int32_t u) {
  if (reducer_ != nullptr) reducer_->bind(grad_ptrs_, u);  // G = 1: bound in place
}

void FsdpStrategy::finish_unit(int32_t u, bool last_micro) {
  if (gather_ != nullptr && options_.sharding == ShardingStrategy::kShardGradOp) {
    // No unit below u reads these parameters again in this backward.
    for (const int32_t o : shards_.completed_at(u)) gather_->release(param_ptrs_, o);
  }
  if (!last_micro) return;  // the full gradients keep accumulating
  if (reducer_ == nullptr) {
    // G = 1: the gradients were accumulated in place.
    if (replicas_ == nullptr) return;
    if (unit_codecs_.empty()) unit_codecs_.resize(static_cast<size_t>(shards_.num_units()));
    for (const int32_t o : shards_.completed_at(u)) {
      std::optional<sdk::BucketCodec>& c = unit_codecs_[static_cast<size_t>(o)];
      if (!c) {
        c.emplace(host_, env_.rank(), codec_,
                  sdk::describe_bucket(layout_, shards_.unit(o).unit, o, replicas_->size(),
                                       replicas_->rank()));
      }
      c->start_allreduce(*replicas_, state_.grad_piece(o));
      c->finish();
    }
    return;
  }
  reducer_->reduce_completed(grad_ptrs_, state_.grads(), u, /*blocking=*/false);
}

void FsdpStrategy::release_all() noexcept {
  if (reducer_ != nullptr) reducer_->abandon();
  for (std::optional<sdk::BucketCodec>& c : unit_codecs_) {
    if (c) c->abandon();
  }
  if (gather_ == nullptr) return;
  gather_->release_all();
  param_ptrs_.bind_all(nullptr);
  grad_ptrs_.bind_all(nullptr);
}

void FsdpStrategy::load(const sdk::StateReader& reader) { state_.load(reader); }

sdk::StepResult FsdpStrategy::step(const sdk::StepArgs& args) {
  ensure_comms();
  const int64_t gathers_before = gather_ != nullptr ? gather_->allgathers() : 0;
  const int64_t scatters_before = reducer_ != nullptr ? reducer_->reduce_scatters() : 0;
  return sdk::run_step(
      // The traffic of the split communicators counts too.
      args, {&env_.world(), group_split_.get(), replica_split_.get()},
      // The reducer adds each unit's reduced piece into the gradients once.
      {.zero_grads = [&] { state_.zero_grads(); },
       .forward_backward =
           [&] {
             FsdpHooks hooks(*this);
             return runner_.run(args.micro_batches, args.loss_scales, param_ptrs_, grad_ptrs_,
                                &hooks);
           },
       .finish =
           [&] {
             if (reducer_ != nullptr) reducer_->finish_all();
           },
       .release = [&] { release_all(); },  // abandons what is still pending
       // Inside a group each element's gradient lives on exactly one rank,
       // and every group holds the same reduced gradients: the group's sum
       // is global.
       .sum_squares =
           [&] { return state_.global_sum_squares(group_size_ > 1 ? &group() : nullptr); },
       .update = [&](float factor) { state_.scale_and_step(args, factor); },
       .after_update =
           [&] {
             if (env_.rank() == 0 && gather_ != nullptr && host_.enabled(TESSERA_LOG_DEBUG)) {
               host_.debug("fsdp: step ", args.step, ": ", gather_->allgathers() - gathers_before,
                           " allgathers and ", reducer_->reduce_scatters() - scatters_before,
                           " reduce-scatters of ", shards_.num_units(), " FSDP units");
             }
           }});
}

void FsdpStrategy::save(const sdk::StateWriter& writer) {
  const bool first_group = env_.rank() / group_size_ == 0;
  if (writer.all_replicas()) ensure_comms();
  // The written parameters are the f32 masters, whatever param_dtype is.
  std::unique_ptr<sdk::UnitGather> exact;
  if (writer.all_replicas() && gather_ != nullptr) {
    exact = std::make_unique<sdk::UnitGather>(host_, group(), shards_, env_.rank());
  }
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    if (writer.all_replicas()) {
      state_.write_whole_unit(writer, exact.get(), u);
      state_.write_piece(writer, u, /*with_params=*/false);
    } else if (first_group) {  // the other groups hold the same values
      state_.write_piece(writer, u, /*with_params=*/true);
    }
  }
}

sdk::Estimate FsdpStrategy::estimate(const sdk::Host& /*host*/, const sdk::Options& options,
                                     const sdk::EstimateArgs& args) {
  check_world_size("fsdp", args.world_size);
  const int32_t n = args.world_size;
  const FsdpOptions o = FsdpOptions::read(options, n);
  const sdk::ModelDesc& model = args.model;
  const int32_t group = o.group_size(n);
  sdk::Estimate e =
      sdk::data_parallel_estimate(model, n, sdk::read_activation_checkpointing(options, "fsdp"));
  const sdk::ShardedUnits units = sdk::sharded_units(model, o.min_params);
  const int64_t shard = units.shard_elements(group);
  sdk::set_persistent(e, shard, shard, shard, model.optimizer_slots());
  sdk::ShardedSchedule s;
  using Gather = sdk::ShardedSchedule::Gather;
  s.gather = group == 1                                     ? Gather::kReplicated
             : o.sharding == ShardingStrategy::kShardGradOp ? Gather::kForwardOnce
                                                            : Gather::kEachUse;
  s.prefetch = o.prefetch;
  s.group = group;
  s.replicas = n / group;
  s.param_dtype = o.param_dtype;
  s.reduce_dtype = o.reduce_dtype;
  s.micro_batches = model.micro_batches();
  const sdk::ShardedTraffic t = sdk::simulate_sharded_step(units, s);
  e[TESSERA_MEM_COMM] = t.comm_peak;
  e.add_traffic("data", n, t.bytes, t.messages);
  return e;
}

}  // namespace tessera::strategies

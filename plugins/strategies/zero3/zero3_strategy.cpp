// The `zero3` strategy (see zero3_strategy.hpp).
#include "zero3_strategy.hpp"

#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/estimate_formulas.hpp"
#include "tessera/sdk/step_frame.hpp"

namespace tessera::strategies {

// The runner's callbacks: gather before each unit's forward and backward,
// prefetching the next unit in the direction of the pass; gradients bound
// before the backward, their reduce-scatters started after it on the last
// micro-batch.
class Zero3Hooks final : public sdk::RunnerHooks {
 public:
  explicit Zero3Hooks(Zero3Strategy& s) : s_(s) {}
  void before_forward(int32_t unit, int32_t /*micro*/) override {
    use(unit, unit + 1 < s_.shards_.num_units() ? unit + 1 : -1);
  }
  void before_backward(int32_t unit, int32_t /*micro*/) override {
    use(unit, unit - 1);
    s_.reducer_.bind(s_.grad_ptrs_, unit);
  }
  void after_backward(int32_t unit, int32_t /*micro*/, bool last_micro) override {
    // Otherwise the full gradients keep accumulating.
    if (last_micro) {
      s_.reducer_.reduce_completed(s_.grad_ptrs_, s_.state_.grads(), unit, /*blocking=*/false);
    }
  }

 private:
  // Gathers unit `unit` and frees every other gathered unit; without
  // prefetching `next` is neither kept nor started.
  void use(int32_t unit, int32_t next) {
    const bool prefetch = s_.options_.prefetch;
    s_.gather_.use(s_.param_ptrs_, s_.state_.params(), unit, prefetch ? next : -1, prefetch);
  }

  Zero3Strategy& s_;
};

void Zero3Strategy::check(const sdk::Host& /*host*/, const sdk::Options& options,
                          int32_t world_size) {
  check_world_size("zero3", world_size);
  (void)Zero3Options::read(options);
  (void)sdk::read_activation_checkpointing(options, "zero3");
}

Zero3Strategy::Zero3Strategy(const sdk::Host& host, const sdk::Options& options,
                             sdk::StrategyEnv& env)
    : sdk::DataParallelStrategy(env),
      host_(host),
      env_(env),
      options_(Zero3Options::read(options)),
      layout_(env.model()),
      shards_(layout_, env.world_size(), env.rank()),
      state_(host, shards_, env.optimizer(), env.rank()),
      param_ptrs_(layout_),
      grad_ptrs_(layout_),
      gather_(host, env.world(), shards_, env.rank()),
      // Summable compressors only: the gradients are reduce-scattered.
      reducer_(host, env.world(), shards_,
               sdk::GradCodec::select(env, options_.reduce_dtype, "zero3"), env.rank(), nullptr,
               "zero3"),
      runner_(host, env.model(), env.rank(), true,
              sdk::read_activation_checkpointing(options, "zero3")) {
  if (env.rank() == 0) {
    host_.debug("zero3: ", layout_.total(), " parameters in ", shards_.num_units(),
                " units, shard of ", shards_.shard_elements(), " elements per rank, prefetch ",
                options_.prefetch ? "on" : "off", ", gradients reduced in ",
                dtype_name(options_.reduce_dtype), ", ", env.world_size(), " ranks");
  }
}

void Zero3Strategy::release_all() noexcept {
  reducer_.abandon();
  gather_.release_all();
  param_ptrs_.bind_all(nullptr);
  grad_ptrs_.bind_all(nullptr);
}

void Zero3Strategy::load(const sdk::StateReader& reader) { state_.load(reader); }

sdk::StepResult Zero3Strategy::step(const sdk::StepArgs& args) {
  sdk::CommView& world = env_.world();
  return sdk::run_step(
      args, {&world},
      // The reducer adds each unit's reduced piece into the gradients once.
      {.zero_grads = [&] { state_.zero_grads(); },
       .forward_backward =
           [&] {
             Zero3Hooks hooks(*this);
             return runner_.run(args.micro_batches, args.loss_scales, param_ptrs_, grad_ptrs_,
                                &hooks);
           },
       .finish = [&] { reducer_.finish_all(); },
       .release = [&] { release_all(); },  // abandons what is still pending
       // Each element's gradient lives on exactly one rank.
       .sum_squares =
           [&] { return state_.global_sum_squares(world.size() > 1 ? &world : nullptr); },
       .update = [&](float factor) { state_.scale_and_step(args, factor); }});
}

void Zero3Strategy::save(const sdk::StateWriter& writer) {
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    if (writer.all_replicas()) state_.write_whole_unit(writer, &gather_, u);
    state_.write_piece(writer, u, /*with_params=*/!writer.all_replicas());
  }
}

sdk::Estimate Zero3Strategy::estimate(const sdk::Host& /*host*/, const sdk::Options& options,
                                      const sdk::EstimateArgs& args) {
  check_world_size("zero3", args.world_size);
  const Zero3Options o = Zero3Options::read(options);
  const sdk::ModelDesc& model = args.model;
  const int32_t n = args.world_size;
  sdk::Estimate e =
      sdk::data_parallel_estimate(model, n, sdk::read_activation_checkpointing(options, "zero3"));
  const sdk::ShardedUnits units = sdk::sharded_units(model);
  const int64_t shard = units.shard_elements(n);
  sdk::set_persistent(e, shard, shard, shard, model.optimizer_slots());
  sdk::ShardedSchedule s;
  s.gather = sdk::ShardedSchedule::Gather::kEachUse;
  s.zero3_ahead = true;
  s.prefetch = o.prefetch;
  s.group = n;
  s.reduce_dtype = o.reduce_dtype;
  s.micro_batches = model.micro_batches();
  const sdk::ShardedTraffic t = sdk::simulate_sharded_step(units, s);
  e[TESSERA_MEM_COMM] = t.comm_peak;
  e.add_traffic("data", n, t.bytes, t.messages);
  return e;
}

}  // namespace tessera::strategies

// The `zero2` strategy (see zero2_strategy.hpp).
#include "zero2_strategy.hpp"

#include <algorithm>

#include "tessera/sdk/estimate_formulas.hpp"
#include "tessera/sdk/flat_state.hpp"
#include "tessera/sdk/step_frame.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::strategies {

// The runner's callbacks: gradient slots bound to full per-unit buffers
// before each unit's backward, reduce-scatters started after it, on every
// micro-batch (blocking without overlap).
class Zero2Hooks final : public sdk::RunnerHooks {
 public:
  explicit Zero2Hooks(Zero2Strategy& s) : s_(s) {}
  void before_backward(int32_t unit, int32_t /*micro*/) override {
    s_.reducer_.bind(s_.grad_ptrs_, unit);
  }
  void after_backward(int32_t unit, int32_t /*micro*/, bool /*last_micro*/) override {
    s_.reducer_.reduce_completed(s_.grad_ptrs_, s_.state_.grads(), unit,
                                 /*blocking=*/!s_.options_.overlap);
  }

 private:
  Zero2Strategy& s_;
};

void Zero2Strategy::check(const sdk::Host& /*host*/, const sdk::Options& options,
                          int32_t world_size) {
  check_world_size("zero2", world_size);
  (void)Zero2Options::read(options);
  (void)sdk::read_activation_checkpointing(options, "zero2");
}

Zero2Strategy::Zero2Strategy(const sdk::Host& host, const sdk::Options& options,
                             sdk::StrategyEnv& env)
    : sdk::DataParallelStrategy(env),
      host_(host),
      env_(env),
      options_(Zero2Options::read(options)),
      layout_(env.model()),
      shards_(layout_, env.world_size(), env.rank()),
      params_(host, layout_, env.rank(), /*with_grads=*/false),
      state_(host, shards_, env.optimizer(), env.rank(), params_),
      grad_ptrs_(layout_),
      // Any compressor: a gather or collective one allreduces each unit's
      // gradients and keeps this rank's piece.
      reducer_(host, env.world(), shards_,
               sdk::GradCodec::select(env, options_.reduce_dtype, "zero2"), -1, nullptr, "zero2",
               /*allreduce_fallback=*/true),
      runner_(host, env.model(), env.rank(), true,
              sdk::read_activation_checkpointing(options, "zero2")) {
  if (env.rank() == 0) {
    host_.debug("zero2: ", layout_.total(), " parameters in ", shards_.num_units(),
                " units, gradient and optimizer shard of ", shards_.shard_elements(),
                " elements per rank, overlap ", options_.overlap ? "on" : "off", ", reduce dtype ",
                ::tessera::dtype_name(options_.reduce_dtype), ", ", env.world_size(), " ranks");
  }
}

void Zero2Strategy::gather_params() {
  sdk::CommView& world = env_.world();
  if (world.size() == 1) return;  // the pieces are the whole units, updated in place
  sdk::TrackedBuffer<float> send(host_, env_.rank(), TESSERA_MEM_COMM);
  sdk::TrackedBuffer<float> recv(host_, env_.rank(), TESSERA_MEM_COMM);
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    const sdk::UnitShard& s = shards_.unit(u);
    if (s.unit.empty()) continue;
    // This rank's piece, padded with zeros to the common piece length.
    send.resize(static_cast<size_t>(s.shard.shard_size));
    send.zero();
    const std::span<float> mine = state_.real_params(u);
    std::copy(mine.begin(), mine.end(), send.data());
    recv.resize(static_cast<size_t>(s.shard.padded_total));
    world.allgather(std::span<const float>(send.span()), recv.span());
    const std::span<float> unit = params_.params(s.unit);
    std::copy(recv.data(), recv.data() + unit.size(), unit.begin());
  }
}

void Zero2Strategy::load(const sdk::StateReader& reader) {
  sdk::read_params(reader, layout_, sdk::FlatRange{0, layout_.total()}, params_.params());
  state_.load(reader);
}

sdk::StepResult Zero2Strategy::step(const sdk::StepArgs& args) {
  sdk::CommView& world = env_.world();
  return sdk::run_step(
      args, {&world},
      {.zero_grads = [&] { state_.zero_grads(); },
       .forward_backward =
           [&] {
             Zero2Hooks hooks(*this);
             return runner_.run(args.micro_batches, args.loss_scales, params_.param_ptrs(),
                                grad_ptrs_, &hooks);
           },
       .finish = [&] { reducer_.finish_all(); },
       .abandon = [&] { reducer_.abandon(); },
       .release = [&] { grad_ptrs_.bind_all(nullptr); },
       // Each element's gradient lives on exactly one rank.
       .sum_squares =
           [&] { return state_.global_sum_squares(world.size() > 1 ? &world : nullptr); },
       .update = [&](float factor) { state_.scale_and_step(args, factor); },
       .after_update = [&] { gather_params(); }});
}

void Zero2Strategy::save(const sdk::StateWriter& writer) {
  if (writer.all_replicas()) {
    sdk::write_params(writer, layout_, sdk::FlatRange{0, layout_.total()}, params_.params());
  }
  for (int32_t u = 0; u < shards_.num_units(); ++u) {
    state_.write_piece(writer, u, /*with_params=*/!writer.all_replicas());
  }
}

sdk::Estimate Zero2Strategy::estimate(const sdk::Host& /*host*/, const sdk::Options& options,
                                      const sdk::EstimateArgs& args) {
  check_world_size("zero2", args.world_size);
  const Zero2Options o = Zero2Options::read(options);
  const sdk::ModelDesc& model = args.model;
  const int32_t n = args.world_size;
  sdk::Estimate e =
      sdk::data_parallel_estimate(model, n, sdk::read_activation_checkpointing(options, "zero2"));
  const sdk::ShardedUnits units = sdk::sharded_units(model);
  const int64_t shard = units.shard_elements(n);
  sdk::set_persistent(e, model.params(), shard, shard, model.optimizer_slots());
  sdk::ShardedSchedule s;
  s.gather = sdk::ShardedSchedule::Gather::kReplicated;
  s.zero2 = true;
  s.blocking = !o.overlap;
  s.group = n;
  s.reduce_dtype = o.reduce_dtype;
  s.micro_batches = model.micro_batches();
  const sdk::ShardedTraffic t = sdk::simulate_sharded_step(units, s);
  e[TESSERA_MEM_COMM] = t.comm_peak;
  e.add_traffic("data", n, t.bytes, t.messages);
  return e;
}

}  // namespace tessera::strategies

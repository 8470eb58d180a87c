// The `zero1` strategy (see zero1_strategy.hpp).
#include "zero1_strategy.hpp"

#include <algorithm>

#include "tessera/sdk/bucket_reducer.hpp"
#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/estimate_formulas.hpp"
#include "tessera/sdk/flat_state.hpp"
#include "tessera/sdk/step_frame.hpp"

namespace tessera::strategies {

void Zero1Strategy::check(const sdk::Host& /*host*/, const sdk::Options& options,
                          int32_t world_size) {
  check_world_size("zero1", world_size);
  (void)Zero1Options::read(options);
  (void)sdk::read_activation_checkpointing(options, "zero1");
}

Zero1Strategy::Zero1Strategy(const sdk::Host& host, const sdk::Options& options,
                             sdk::StrategyEnv& env)
    : sdk::DataParallelStrategy(env),
      host_(host),
      env_(env),
      options_(Zero1Options::read(options)),
      layout_(env.model()),
      state_(host, layout_, env.rank()),
      grid_(host, env.world(), layout_, options_.first_bucket_elements(),
            options_.bucket_elements(), env.rank()),
      optim_(env.optimizer().make_state(grid_.shard().shard_size)),
      runner_(host, env.model(), env.rank(), true,
              sdk::read_activation_checkpointing(options, "zero1")) {
  if (env.rank() == 0) {
    host_.debug("zero1: ", layout_.total(), " parameters, optimizer shard of ",
                grid_.shard().shard_size, " elements per rank (",
                grid_.shard().padded_total - layout_.total(), " padding), ", grid_.buckets().size(),
                " buckets (first ", options_.first_bucket_mb, " MiB, then ", options_.bucket_mb,
                " MiB), ", grid_.staging_elements(), " staged elements, overlap ",
                options_.overlap ? "on" : "off", ", ", env.world_size(), " ranks");
  }
}

void Zero1Strategy::load(const sdk::StateReader& reader) {
  const sdk::FlatRange mine = grid_.shard().real;
  sdk::read_params(reader, layout_, mine, state_.params(mine));
  grid_.allgather(state_.params());
  sdk::read_optimizer_state(reader, layout_, env_.optimizer(), optim_, mine);
}

sdk::StepResult Zero1Strategy::step(const sdk::StepArgs& args) {
  sdk::CommView& world = env_.world();
  const sdk::FlatRange mine = grid_.shard().real;
  return sdk::run_step(
      args, {&world},
      {.zero_grads =
           [&] {
             state_.zero_grads();
             grid_.begin_step(state_.grads());
           },
       .forward_backward =
           [&] {
             sdk::BucketHooks hooks(grid_);
             return runner_.run(args.micro_batches, args.loss_scales, state_.param_ptrs(),
                                state_.grad_ptrs(), options_.overlap ? &hooks : nullptr);
           },
       .finish = [&] { grid_.finish(); },
       .abandon = [&] { grid_.abandon(); },
       // After the reduce-scatter only this rank's shard holds summed
       // gradients: the global sum of squares is the sum of the shards' (one
       // f64 scalar allreduced).
       .sum_squares =
           [&] {
             double total = mine.empty() ? 0.0 : sdk::sum_squares(state_.grads(mine));
             world.allreduce(std::span<double>(&total, 1), TESSERA_SUM);
             return total;
           },
       // Only the shard is read by the optimizer, so only it is scaled.
       .update =
           [&](float factor) {
             if (mine.empty()) return;
             const std::span<float> grads = state_.grads(mine);
             sdk::scale_in_place(grads, factor);
             env_.optimizer().step(optim_, 0, state_.params(mine), grads, args.step, args.lr);
           },
       .after_update = [&] { grid_.allgather(state_.params()); }});
}

void Zero1Strategy::save(const sdk::StateWriter& writer) {
  const sdk::FlatRange mine = grid_.shard().real;
  if (writer.all_replicas()) {
    const sdk::FlatRange all{0, layout_.total()};
    sdk::write_params(writer, layout_, all, state_.params());
  } else {
    sdk::write_params(writer, layout_, mine, state_.params(mine));
  }
  sdk::write_optimizer_state(writer, layout_, env_.optimizer(), optim_, mine);
}

sdk::Estimate Zero1Strategy::estimate(const sdk::Host& /*host*/, const sdk::Options& options,
                                      const sdk::EstimateArgs& args) {
  check_world_size("zero1", args.world_size);
  const Zero1Options o = Zero1Options::read(options);
  const sdk::ModelDesc& model = args.model;
  const int32_t n = args.world_size;
  sdk::Estimate e =
      sdk::data_parallel_estimate(model, n, sdk::read_activation_checkpointing(options, "zero1"));
  const int64_t psi = model.params();
  const int64_t shard = sdk::ceil_div(psi, n);
  sdk::set_persistent(e, psi, psi, shard, model.optimizer_slots());
  if (n > 1) {
    const sdk::ShardGridPlan plan =
        sdk::shard_grid_plan(shard, n, o.first_bucket_elements(), o.bucket_elements());
    const int64_t slots = plan.slot_len[0] + plan.slot_len[1];
    // Two slots of a send area (N blocks) and a receive area (one block).
    e[TESSERA_MEM_COMM] = (n + 1) * slots * 4;
    int64_t bytes = sdk::norm_allreduce_bytes(n);
    for (const int64_t len : plan.buckets) bytes += sdk::ring_piece_bytes(len * 4, n);
    // The updated shards are allgathered in chunks of the larger slot.
    const int64_t chunk = std::max(plan.slot_len[0], plan.slot_len[1]);
    bytes += sdk::ring_piece_bytes(shard * 4, n);
    const auto messages =
        static_cast<int64_t>(plan.buckets.size()) + sdk::ceil_div(shard, chunk) + 1;
    e.add_traffic("data", n, bytes, messages);
  } else {
    e.add_traffic("data", 1, 0, 0);
  }
  return e;
}

}  // namespace tessera::strategies

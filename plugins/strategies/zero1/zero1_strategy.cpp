// The `zero1` strategy (see zero1_strategy.hpp).
#include "zero1_strategy.hpp"

#include "tessera/sdk/bucket_reducer.hpp"
#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/estimate_formulas.hpp"
#include "tessera/sdk/flat_state.hpp"
#include "tessera/sdk/step_frame.hpp"

namespace tessera::strategies {

void Zero1Strategy::check(const sdk::Host& /*host*/, const sdk::Options& options,
                          int32_t world_size) {
  check_world_size("zero1", world_size);
  (void)Zero1Options::read(options, "zero1").node_size(world_size, "zero1");
  (void)sdk::read_activation_checkpointing(options, "zero1");
}

Zero1Strategy::Zero1Strategy(const sdk::Host& host, const sdk::Options& options,
                             sdk::StrategyEnv& env)
    : sdk::DataParallelStrategy(env),
      host_(host),
      env_(env),
      options_(Zero1Options::read(options, "zero1")),
      layout_(env.model()),
      nodes_(options_.hierarchy ? std::make_unique<sdk::NodeGroups>(
                                      env.world(), options_.node_size(env.world_size(), "zero1"))
                                : nullptr),
      grid_(host, env.world(), layout_, options_.first_bucket_elements(),
            options_.bucket_elements(), sdk::GradCodec::select(env, TESSERA_F32, "zero1"),
            nodes_.get()),
      state_(host, layout_, env.rank(), true, grid_.padding()),
      optim_(env.optimizer().make_state(grid_.shard_elements())),
      runner_(host, env.model(), env.rank(), true,
              sdk::read_activation_checkpointing(options, "zero1")) {
  if (env.rank() == 0) {
    host_.debug("zero1: ", layout_.total(), " parameters (", grid_.padding(),
                " padding), optimizer shard of ", grid_.shard_elements(), " elements per rank in ",
                grid_.buckets().size(), " buckets (first ", options_.first_bucket_mb, " MiB, then ",
                options_.bucket_mb, " MiB), reduced and gathered in place, overlap ",
                options_.overlap ? "on" : "off", ", ", env.world_size(), " ranks",
                nodes_ ? ::tessera::detail::concat(", hierarchical: ", nodes_->nodes(),
                                                   " nodes of ", nodes_->local_size(), " ranks")
                       : std::string());
  }
}

void Zero1Strategy::load(const sdk::StateReader& reader) {
  for (const ShardGrid::Block& b : grid_.blocks()) {
    sdk::read_params(reader, layout_, b.real, state_.params(b.real));
  }
  grid_.allgather(state_.padded_params());
  if (!sdk::has_optimizer_state(reader, layout_, env_.optimizer())) return;
  for (const ShardGrid::Block& b : grid_.blocks()) {
    sdk::read_optimizer_state(reader, layout_, env_.optimizer(), optim_, b.real, b.state_offset);
  }
}

sdk::StepResult Zero1Strategy::step(const sdk::StepArgs& args) {
  sdk::CommView& world = env_.world();
  sdk::CommView* intra = nodes_ ? &nodes_->intra() : nullptr;
  sdk::CommView* inter = nodes_ ? &nodes_->inter() : nullptr;
  const sdk::CommMeter cross_node({inter});
  sdk::StepResult result = sdk::run_step(
      args, {&world, intra, inter},
      {.zero_grads =
           [&] {
             state_.zero_grads();
             grid_.begin_step(state_.padded_grads());
           },
       .forward_backward =
           [&] {
             sdk::BucketHooks hooks(grid_);
             return runner_.run(args.micro_batches, args.loss_scales, state_.param_ptrs(),
                                state_.grad_ptrs(), options_.overlap ? &hooks : nullptr);
           },
       .finish = [&] { grid_.finish(); },
       .abandon = [&] { grid_.abandon(); },
       // After the reduce-scatter only this rank's blocks hold summed
       // gradients: the global sum of squares is the sum of the ranks' (one
       // f64 scalar allreduced).
       .sum_squares =
           [&] {
             double total = shard_sum_squares();
             world.allreduce(std::span<double>(&total, 1), TESSERA_SUM);
             return total;
           },
       // Only this rank's blocks are read by the optimizer, so only they are
       // scaled.
       .update =
           [&](float factor) {
             for (const ShardGrid::Block& b : grid_.blocks()) {
               if (b.real.empty()) continue;
               const std::span<float> grads = state_.grads(b.real);
               host_.scale(grads, factor);
               const std::span<float> params = state_.params(b.real);
               env_.optimizer().step(optim_, b.state_offset, params, grads, args.step, args.lr);
             }
           },
       .after_update = [&] { grid_.allgather(state_.padded_params()); }});
  cross_node.add_cross_node_to(result);
  return result;
}

double Zero1Strategy::shard_sum_squares() {
  double total = 0.0;
  for (const ShardGrid::Block& b : grid_.blocks()) total += host_.sum_squares(state_.grads(b.real));
  return total;
}

void Zero1Strategy::save(const sdk::StateWriter& writer) {
  if (writer.all_replicas()) {
    const sdk::FlatRange all{0, layout_.total()};
    sdk::write_params(writer, layout_, all, state_.params());
  }
  for (const ShardGrid::Block& b : grid_.blocks()) {
    if (b.real.empty()) continue;
    if (!writer.all_replicas()) sdk::write_params(writer, layout_, b.real, state_.params(b.real));
    sdk::write_optimizer_state(writer, layout_, env_.optimizer(), optim_, b.real, b.state_offset);
  }
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
  // The parameter and gradient buffers are padded to N shards.
  sdk::set_persistent(e, shard * n, shard * n, shard, model.optimizer_slots());
  if (n > 1) {
    // Every bucket is reduce-scattered and, after the update, allgathered
    // in place: no communication staging.
    const sdk::ShardGridPlan plan =
        sdk::shard_grid_plan(shard, n, o.first_bucket_elements(), o.bucket_elements());
    int64_t bytes = sdk::norm_allreduce_bytes(n);
    for (const int64_t len : plan.buckets) bytes += 2 * sdk::ring_piece_bytes(len * 4, n);
    const auto messages = 2 * static_cast<int64_t>(plan.buckets.size()) + 1;
    e.add_traffic("data", n, bytes, messages);
  } else {
    e.add_traffic("data", 1, 0, 0);
  }
  return e;
}

}  // namespace tessera::strategies

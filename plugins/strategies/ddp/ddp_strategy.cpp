// The `ddp` strategy (see ddp_strategy.hpp).
#include "ddp_strategy.hpp"

#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/estimate_formulas.hpp"
#include "tessera/sdk/flat_state.hpp"
#include "tessera/sdk/step_frame.hpp"

namespace tessera::strategies {

void DdpStrategy::check(const sdk::Host& /*host*/, const sdk::Options& options,
                        int32_t world_size) {
  check_world_size("ddp", world_size);
  (void)DdpOptions::read(options).node_size(world_size, "ddp");
  (void)sdk::read_activation_checkpointing(options, "ddp");
}

DdpStrategy::DdpStrategy(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env)
    : sdk::DataParallelStrategy(env),
      host_(host),
      env_(env),
      options_(DdpOptions::read(options)),
      layout_(env.model()),
      state_(host, layout_, env.rank()),
      optim_(env.optimizer().make_state(layout_.total())),
      runner_(host, env.model(), env.rank(), true,
              sdk::read_activation_checkpointing(options, "ddp")),
      nodes_(options_.hierarchy ? std::make_unique<sdk::NodeGroups>(
                                      env.world(), options_.node_size(env.world_size(), "ddp"))
                                : nullptr),
      reducer_(host, env.world(), layout_, options_.buckets(), env.rank(),
               sdk::GradCodec::select(env, options_.reduce_dtype, "ddp"), nodes_.get()) {
  if (env.rank() == 0) {
    host_.debug("ddp: ", layout_.total(), " parameters in ", reducer_.buckets().size(),
                " buckets (first ", options_.first_bucket_mb, " MiB, then ", options_.bucket_mb,
                " MiB), overlap ", options_.overlap ? "on" : "off", ", reduce_dtype ",
                dtype_name(options_.reduce_dtype), ", ", env.world_size(), " ranks",
                nodes_ ? ::tessera::detail::concat(", hierarchical: ", nodes_->nodes(),
                                                   " nodes of ", nodes_->local_size(), " ranks")
                       : std::string());
  }
}

void DdpStrategy::load(const sdk::StateReader& reader) {
  const sdk::FlatRange all{0, layout_.total()};
  sdk::read_params(reader, layout_, all, state_.params());
  env_.world().broadcast(state_.params(), 0);
  sdk::read_optimizer_state(reader, layout_, env_.optimizer(), optim_, all);
}

sdk::StepResult DdpStrategy::step(const sdk::StepArgs& args) {
  sdk::CommView* intra = nodes_ ? &nodes_->intra() : nullptr;
  sdk::CommView* inter = nodes_ ? &nodes_->inter() : nullptr;
  const sdk::CommMeter cross_node({inter});
  sdk::StepResult result = sdk::run_step(
      args, {&env_.world(), intra, inter},
      {.zero_grads =
           [&] {
             state_.zero_grads();
             reducer_.begin_step(state_.grads());
           },
       .forward_backward =
           [&] {
             sdk::BucketHooks hooks(reducer_);
             return runner_.run(args.micro_batches, args.loss_scales, state_.param_ptrs(),
                                state_.grad_ptrs(), options_.overlap ? &hooks : nullptr);
           },
       .finish = [&] { reducer_.finish(); },
       .abandon = [&] { reducer_.abandon(); },
       // Replicated gradients: this rank's sum of squares is the global one.
       .sum_squares = [&] { return host_.sum_squares(state_.grads()); },
       .update =
           [&](float factor) {
             host_.scale(state_.grads(), factor);
             env_.optimizer().step(optim_, 0, state_.params(), state_.grads(), args.step, args.lr);
           }});
  cross_node.add_cross_node_to(result);
  return result;
}

void DdpStrategy::save(const sdk::StateWriter& writer) {
  if (env_.rank() != 0 && !writer.all_replicas()) return;
  const sdk::FlatRange all{0, layout_.total()};
  sdk::write_params(writer, layout_, all, state_.params());
  sdk::write_optimizer_state(writer, layout_, env_.optimizer(), optim_, all);
}

sdk::Estimate DdpStrategy::estimate(const sdk::Host& /*host*/, const sdk::Options& options,
                                    const sdk::EstimateArgs& args) {
  check_world_size("ddp", args.world_size);
  const DdpOptions o = DdpOptions::read(options);
  const sdk::ModelDesc& model = args.model;
  const int32_t n = args.world_size;
  sdk::Estimate e =
      sdk::data_parallel_estimate(model, n, sdk::read_activation_checkpointing(options, "ddp"));
  const int64_t psi = model.params();
  sdk::set_persistent(e, psi, psi, psi, model.optimizer_slots());
  // A 16-bit reduce_dtype stages a copy of every gradient.
  if (o.reduce_dtype != TESSERA_F32) e[TESSERA_MEM_COMM] = psi * 2;
  const auto wire = static_cast<int64_t>(tessera_dtype_size(o.reduce_dtype));
  int64_t bytes = 0;
  int64_t messages = 0;
  for (const int64_t b :
       sdk::grad_bucket_sizes(model, o.first_bucket_elements(), o.bucket_elements())) {
    bytes += sdk::ring_allreduce_bytes(b * wire, n);
    ++messages;
  }
  e.add_traffic("data", n, bytes, n > 1 ? messages : 0);
  return e;
}

}  // namespace tessera::strategies

// The `none` strategy (see none_strategy.hpp).
#include "none_strategy.hpp"

#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/estimate_formulas.hpp"
#include "tessera/sdk/flat_state.hpp"
#include "tessera/sdk/step_frame.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {
namespace {

// Throws unless the world has exactly one rank.
void require_single_rank(int32_t world_size) {
  TESSERA_CHECK(world_size == 1, TESSERA_ERR_INVALID_ARGUMENT,
                "strategy 'none' trains on a single rank, but the world size is ", world_size,
                "; use strategy 'ddp' to train on ", world_size, " ranks");
}

// The model of `env`, once the world is known to be a single rank.
const sdk::ModelView& single_rank_model(const sdk::StrategyEnv& env) {
  require_single_rank(env.world_size());
  return env.model();
}

}  // namespace

void NoneStrategy::check(const sdk::Host& /*host*/, const sdk::Options& options,
                         int32_t world_size) {
  require_single_rank(world_size);
  (void)sdk::read_activation_checkpointing(options, "none");
}

NoneStrategy::NoneStrategy(const sdk::Host& host, const sdk::Options& options,
                           sdk::StrategyEnv& env)
    : host_(host),
      env_(env),
      layout_(single_rank_model(env)),
      state_(host, layout_, env.rank()),
      optim_(env.optimizer().make_state(layout_.total())),
      runner_(host, env.model(), env.rank(), true,
              sdk::read_activation_checkpointing(options, "none")) {
  host_.debug("none: ", layout_.entries().size(), " parameter tensors, ", layout_.total(),
              " elements, optimizer '", env.optimizer().name(), "'");
}

tessera_strategy_layout NoneStrategy::layout() const {
  tessera_strategy_layout l{};
  l.struct_size = sizeof l;
  l.data_rank = 0;
  l.data_size = 1;
  return l;
}

void NoneStrategy::load(const sdk::StateReader& reader) {
  const sdk::FlatRange all{0, layout_.total()};
  sdk::read_params(reader, layout_, all, state_.params());
  sdk::read_optimizer_state(reader, layout_, env_.optimizer(), optim_, all);
}

sdk::StepResult NoneStrategy::step(const sdk::StepArgs& args) {
  // One rank: no communicator to meter, nothing to reduce.
  return sdk::run_step(args, {},
                       {.zero_grads = [&] { state_.zero_grads(); },
                        .forward_backward =
                            [&] {
                              return runner_.run(args.micro_batches, args.loss_scales,
                                                 state_.param_ptrs(), state_.grad_ptrs());
                            },
                        .sum_squares = [&] { return host_.sum_squares(state_.grads()); },
                        .update =
                            [&](float factor) {
                              host_.scale(state_.grads(), factor);
                              env_.optimizer().step(optim_, 0, state_.params(), state_.grads(),
                                                    args.step, args.lr);
                            }});
}

void NoneStrategy::save(const sdk::StateWriter& writer) {
  const sdk::FlatRange all{0, layout_.total()};
  sdk::write_params(writer, layout_, all, state_.params());
  sdk::write_optimizer_state(writer, layout_, env_.optimizer(), optim_, all);
}

sdk::Estimate NoneStrategy::estimate(const sdk::Host& /*host*/, const sdk::Options& options,
                                     const sdk::EstimateArgs& args) {
  require_single_rank(args.world_size);
  const sdk::ModelDesc& model = args.model;
  sdk::Estimate e =
      sdk::data_parallel_estimate(model, 1, sdk::read_activation_checkpointing(options, "none"));
  const int64_t psi = model.params();
  sdk::set_persistent(e, psi, psi, psi, model.optimizer_slots());
  e.add_traffic("data", 1, 0, 0);
  return e;
}

}  // namespace tessera::strategies

// local_sgd: a strategy plugin built outside the Tessera tree.
//
// Local SGD (periodic parameter averaging): every rank holds the whole model
// and trains it on its own slice of each global batch, stepping its own
// optimizer without communicating; every `sync_every` steps the ranks
// average their parameters (one allreduce), after which every replica is
// the same again. The optimizer state (momentum, Adam's moments) stays
// local to each rank.
//
// Gradient scale. The host's loss scales are 1/global_examples (per token
// for sequence models), so the gradient a rank computes is its SHARE of the
// global mean's gradient: summed over the data-parallel ranks it is the
// global mean's gradient (what ddp's allreduce does), alone it is about
// 1/N of the gradient of the rank's own mean loss. A rank that steps on
// its own gradient therefore multiplies it by N, the data-parallel size.
// With that scale, the mean over ranks of the rescaled gradients is exactly
// the global mean's gradient, also when the global batch does not split
// evenly; so with sync_every = 1 and an update rule that is linear in the
// gradient (sgd, momentum, without clipping) the averaged parameters are
// ddp's, within float rounding. (args.global_examples / args.local_examples
// would instead give each rank the exact mean over its own examples, and the
// average would weigh ranks rather than examples equally.)
//
// Clipping is per rank: each rank clips its own rescaled gradient by its own
// norm and reports that norm; the host logs the largest over the ranks.
//
// Checkpoints hold rank 0's parameters and optimizer state (each element is
// written once across the world). At a sync step the parameters are every
// rank's; between syncs the other replicas' local progress is not in the
// checkpoint, and this plugin warns when it saves such a step.
#include <cstdint>
#include <span>

#include <tessera/sdk/clip.hpp>
#include <tessera/sdk/data_parallel.hpp>
#include <tessera/sdk/flat_params.hpp>
#include <tessera/sdk/flat_state.hpp>
#include <tessera/sdk/replicated_params.hpp>
#include <tessera/sdk/step_frame.hpp>
#include <tessera/sdk/strategy.hpp>
#include <tessera/sdk/unit_runner.hpp>

namespace {

namespace sdk = tessera::sdk;

const tessera_option_decl kOptions[] = {
    {"sync_every", TESSERA_OPT_INT, "4",
     "average the parameters over the ranks after every N-th step (>= 1; 1: every step)"},
};

// The value of sync_every, checked.
int64_t read_sync_every(const sdk::Options& options) {
  const int64_t n = options.get_int("sync_every");
  TESSERA_CHECK(n >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                "option 'sync_every' must be >= 1 (steps between parameter averages), got ", n);
  return n;
}

class LocalSgd final : public sdk::DataParallelStrategy {
 public:
  // Before any rank starts: refuse a bad option here, with a message for
  // the user (the host prefixes it with the strategy's name).
  static void check(const sdk::Host& /*host*/, const sdk::Options& options, int32_t world_size) {
    check_world_size("local_sgd", world_size);
    (void)read_sync_every(options);
  }

  LocalSgd(const sdk::Host& host, const sdk::Options& options, sdk::StrategyEnv& env)
      : sdk::DataParallelStrategy(env),
        host_(host),
        env_(env),
        sync_every_(read_sync_every(options)),
        layout_(env.model()),
        state_(host, layout_, env.rank()),
        optim_(env.optimizer().make_state(layout_.total())),
        runner_(host, env.model(), env.rank()) {
    if (env.rank() == 0) {
      host_.debug("local_sgd: ", layout_.total(), " parameters on each of ", env.world_size(),
                  " ranks, averaged every ", sync_every_, " steps");
    }
  }

  // Every rank reads the whole model (the same values from the same source).
  void load(const sdk::StateReader& reader) override {
    const sdk::FlatRange all{0, layout_.total()};
    sdk::read_params(reader, layout_, all, state_.params());
    sdk::read_optimizer_state(reader, layout_, env_.optimizer(), optim_, all);
  }

  sdk::StepResult step(const sdk::StepArgs& args) override {
    sdk::CommView& world = env_.world();
    // Rank r's gradient is its share of the global mean's gradient: times N
    // it is the gradient this rank steps on (see the top of the file).
    const auto data_size = static_cast<float>(world.size());
    return sdk::run_step(args, {&world},
                         {.zero_grads = [&] { state_.zero_grads(); },
                          .forward_backward =
                              [&] {
                                return runner_.run(args.micro_batches, args.loss_scales,
                                                   state_.param_ptrs(), state_.grad_ptrs());
                              },
                          // Nothing to wait for; the gradients are final once rescaled.
                          .finish = [&] { host_.scale(state_.grads(), data_size); },
                          // This rank's own gradient: its own norm, no allreduce.
                          .sum_squares = [&] { return host_.sum_squares(state_.grads()); },
                          .update =
                              [&](float factor) {
                                host_.scale(state_.grads(), factor);
                                env_.optimizer().step(optim_, 0, state_.params(), state_.grads(),
                                                      args.step, args.lr);
                              },
                          .after_update =
                              [&] {
                                if (!sync_step(args.step)) return;
                                // Every rank receives the same sum and divides it the same
                                // way, so the replicas are bit-identical afterwards.
                                world.allreduce(state_.params(), TESSERA_AVG);
                              }});
  }

  // A checkpoint (each element once across the world) holds rank 0's
  // replica; with all_replicas every rank writes its own.
  void save(const sdk::StateWriter& writer) override {
    if (!writer.all_replicas()) {
      // step() is -1 from a host that does not say, 0 before the first step.
      if (env_.rank() == 0 && writer.step() > 0 && !sync_step(writer.step())) {
        host_.warn("local_sgd: saving step ", writer.step(),
                   ", which is not a multiple of sync_every = ", sync_every_,
                   ": the checkpoint holds rank 0's replica only");
      }
      if (env_.rank() != 0) return;
    }
    const sdk::FlatRange all{0, layout_.total()};
    sdk::write_params(writer, layout_, all, state_.params());
    sdk::write_optimizer_state(writer, layout_, env_.optimizer(), optim_, all);
  }

 private:
  [[nodiscard]] bool sync_step(int64_t step) const noexcept { return step % sync_every_ == 0; }

  sdk::Host host_;
  sdk::StrategyEnv& env_;
  int64_t sync_every_;
  sdk::FlatLayout layout_;
  sdk::ReplicatedParams state_;
  sdk::OptimState optim_;
  sdk::UnitRunner runner_;
};

}  // namespace

TESSERA_REGISTER_STRATEGY(LocalSgd, "local_sgd", "0.1.0",
                          "local SGD: ranks step on their own slices, parameters averaged "
                          "every sync_every steps",
                          kOptions)

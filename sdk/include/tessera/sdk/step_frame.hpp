// The frame of one training step, shared by every strategy's step(): what
// happens around the strategy-specific parts, in one place, in one order.
//
// run_step(args, comms, phases) does, in this order:
//
//   1. meter the communicators `comms` (CommMeter, data_parallel.hpp);
//   2. phases.zero_grads()            clear this rank's gradients and arm
//                                     whatever reduces them this step;
//   3. phases.forward_backward()      forward and backward over the
//                                     micro-batches, returning this rank's
//                                     loss (normally UnitRunner::run with the
//                                     strategy's RunnerHooks);
//   4. phases.finish()                wait for the gradient reductions still
//                                     pending; afterwards the gradients this
//                                     rank updates hold their global sums;
//      if 3 or 4 throws: phases.abandon() (drop pending communication), then
//      phases.release(), then the exception propagates;
//   5. phases.release()               after 3-4 succeeded too: unbind and
//                                     free what lived only for the passes;
//   6. phases.sum_squares()           the GLOBAL sum of squares of the
//                                     gradients (each element counted once
//                                     over the world: allreduce the partial
//                                     sums of sharded gradients, not those of
//                                     replicated ones); from it the frame
//                                     takes the clip factor
//                                     (clip_coefficient(total,
//                                     args.max_grad_norm), which throws for a
//                                     NaN or infinite norm before anything is
//                                     updated) and the reported norm; with a
//                                     loss scale (args.grad_scale S > 1, f16)
//                                     a non-finite sum skips 7 and 8 and the
//                                     result says `skipped`, a finite one is
//                                     divided by S² and the factor by S, so
//                                     the update sees the true gradients;
//   7. phases.update(factor)          multiply the gradients this rank
//                                     updates by `factor` (scale_in_place;
//                                     1 means no clipping) and run the
//                                     optimizer on them;
//   8. phases.after_update()          e.g. allgather the updated parameter
//                                     shards, log the step;
//   9. add the communicators' time blocked and bytes sent since 1 into the
//      result (comm_wait_ns, comm_bytes).
//
// The result's loss is what forward_backward returned and grad_norm the
// global norm before clipping, as tessera_step_result wants them.
//
// Required: zero_grads, forward_backward, sum_squares, update. Optional
// (an empty std::function is skipped): finish, abandon, release,
// after_update. abandon and release run on the error path and should not
// throw (an exception from them would replace the step's own). Every phase runs on the
// calling rank's thread, synchronously; anything collective in a phase must
// be issued in the same order on every rank, as everywhere in step().
//
// A replicated strategy in a few lines (see plugins/strategies/ddp):
//
//   return sdk::run_step(args, {&env_.world()}, {
//       .zero_grads = [&] { state_.zero_grads(); reducer_.begin_step(state_.grads()); },
//       .forward_backward = [&] {
//         sdk::BucketHooks hooks(reducer_);
//         return runner_.run(args.micro_batches, args.loss_scales, state_.param_ptrs(),
//                            state_.grad_ptrs(), &hooks);
//       },
//       .finish = [&] { reducer_.finish(); },
//       .abandon = [&] { reducer_.abandon(); },
//       .sum_squares = [&] { return host_.sum_squares(state_.grads()); },
//       .update = [&](float factor) {
//         host_.scale(state_.grads(), factor);
//         env_.optimizer().step(optim_, 0, state_.params(), state_.grads(), args.step, args.lr);
//       }});
#pragma once

#include <cmath>
#include <functional>
#include <initializer_list>

#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/comm_view.hpp"
#include "tessera/sdk/data_parallel.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/strategy.hpp"

namespace tessera::sdk {

// The strategy-specific parts of a step (see the top of the file). Fill
// it with designated initializers; the lambdas may capture by reference,
// since run_step calls them before it returns.
// (The default member initializers let a designated initializer leave the
// optional ones out without -Wmissing-field-initializers.)
struct StepPhases {
  std::function<void()> zero_grads{};          // required
  std::function<double()> forward_backward{};  // required: this rank's loss
  std::function<void()> finish{};              // optional: pending reductions complete
  std::function<void()> abandon{};             // optional, error path only, should not throw
  std::function<void()> release{};             // optional, both paths, should not throw
  std::function<double()> sum_squares{};       // required: global sum of squares
  std::function<void(float)> update{};         // required: scale by the factor, optimizer step
  std::function<void()> after_update{};        // optional
};

// Runs one step through `phases` (see the top of the file). `comms` are
// the communicators the step sends on (the world and any split; nullptr
// entries are skipped); they must outlive the call. Errors of any phase
// propagate as thrown; a missing required phase is an internal error.
inline StepResult run_step(const StepArgs& args, std::initializer_list<CommView*> comms,
                           const StepPhases& phases) {
  TESSERA_CHECK(phases.zero_grads && phases.forward_backward && phases.sum_squares && phases.update,
                TESSERA_ERR_INTERNAL,
                "run_step: zero_grads, forward_backward, sum_squares and update are required");
  const CommMeter meter(comms);
  phases.zero_grads();
  StepResult result;
  try {
    result.loss = phases.forward_backward();
    if (phases.finish) phases.finish();
  } catch (...) {
    if (phases.abandon) phases.abandon();
    if (phases.release) phases.release();
    throw;
  }
  if (phases.release) phases.release();
  const double total = phases.sum_squares();
  // Under dynamic loss scaling (grad_scale S > 1) the gradients are S times
  // the true ones: an overflow anywhere makes the global sum of squares
  // non-finite on every rank alike, and the update is skipped everywhere;
  // otherwise the clip factor divides S out. S = 1 changes nothing.
  const double scale = args.grad_scale > 0.0f ? static_cast<double>(args.grad_scale) : 1.0;
  if (scale != 1.0 && !std::isfinite(total)) {
    result.skipped = true;
    meter.add_to(result);
    return result;
  }
  const double true_total = scale != 1.0 ? total / (scale * scale) : total;
  float factor = clip_coefficient(true_total, args.max_grad_norm);
  if (scale != 1.0) factor = static_cast<float>(static_cast<double>(factor) / scale);
  result.grad_norm = global_grad_norm(true_total);
  phases.update(factor);
  if (phases.after_update) phases.after_update();
  meter.add_to(result);
  return result;
}

}  // namespace tessera::sdk

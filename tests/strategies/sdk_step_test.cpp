// The SDK around a strategy's step: run_step's phases (order, the error
// path, clipping).
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/host_api.hpp"
#include "tessera/core/options.hpp"
#include "tessera/sdk/step_frame.hpp"
#include "tessera/sdk/strategy.hpp"

namespace tessera::test {
namespace {

// Phases that log their calls; forward_backward returns 1.5 and
// sum_squares `total`.
struct PhaseLog {
  std::vector<std::string> calls;
  float factor = 0.0F;
  double total = 16.0;

  sdk::StepPhases phases() {
    return {.zero_grads = [this] { calls.emplace_back("zero"); },
            .forward_backward =
                [this] {
                  calls.emplace_back("run");
                  return 1.5;
                },
            .finish = [this] { calls.emplace_back("finish"); },
            .abandon = [this] { calls.emplace_back("abandon"); },
            .release = [this] { calls.emplace_back("release"); },
            .sum_squares =
                [this] {
                  calls.emplace_back("sum");
                  return total;
                },
            .update =
                [this](float f) {
                  calls.emplace_back("update");
                  factor = f;
                },
            .after_update = [this] { calls.emplace_back("after"); }};
  }
};

TEST(RunStep, RunsThePhasesInOrderAndClipsByTheGlobalNorm) {
  PhaseLog log;
  sdk::StepArgs args;
  args.max_grad_norm = 2.0;
  const sdk::StepResult r = sdk::run_step(args, {}, log.phases());
  EXPECT_EQ(log.calls, (std::vector<std::string>{"zero", "run", "finish", "release", "sum",
                                                 "update", "after"}));
  EXPECT_EQ(r.loss, 1.5);
  EXPECT_EQ(r.grad_norm, 4.0);  // sqrt(16), before clipping
  EXPECT_EQ(log.factor, sdk::clip_coefficient(16.0, 2.0));
  EXPECT_LT(log.factor, 1.0F);
  EXPECT_EQ(r.comm_wait_ns, 0);
  EXPECT_EQ(r.comm_bytes, 0);

  PhaseLog off;  // clipping off: factor 1
  args.max_grad_norm = 0.0;
  (void)sdk::run_step(args, {}, off.phases());
  EXPECT_EQ(off.factor, 1.0F);
}

TEST(RunStep, OptionalPhasesMayBeLeftOut) {
  PhaseLog log;
  sdk::StepPhases p = log.phases();
  p.finish = nullptr;
  p.abandon = nullptr;
  p.release = nullptr;
  p.after_update = nullptr;
  (void)sdk::run_step(sdk::StepArgs{}, {}, p);
  EXPECT_EQ(log.calls, (std::vector<std::string>{"zero", "run", "sum", "update"}));
}

TEST(RunStep, AFailedPassAbandonsThenReleasesAndUpdatesNothing) {
  for (const bool in_finish : {false, true}) {
    PhaseLog log;
    sdk::StepPhases p = log.phases();
    auto fail = [&log] {
      log.calls.emplace_back("fail");
      throw Error(TESSERA_ERR_PEER_LOST, "peer gone");
    };
    if (in_finish) {
      p.finish = fail;
    } else {
      p.forward_backward = [fail]() -> double {
        fail();
        return 0.0;
      };
    }
    try {
      (void)sdk::run_step(sdk::StepArgs{}, {}, p);
      FAIL() << "the error did not propagate";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), TESSERA_ERR_PEER_LOST);
    }
    const std::vector<std::string> expected =
        in_finish ? std::vector<std::string>{"zero", "run", "fail", "abandon", "release"}
                  : std::vector<std::string>{"zero", "fail", "abandon", "release"};
    EXPECT_EQ(log.calls, expected) << (in_finish ? "finish" : "forward_backward");
  }
}

TEST(RunStep, ANonFiniteNormStopsBeforeTheUpdate) {
  PhaseLog log;
  log.total = std::numeric_limits<double>::quiet_NaN();
  sdk::StepArgs args;
  args.max_grad_norm = 1.0;
  EXPECT_THROW((void)sdk::run_step(args, {}, log.phases()), Error);
  EXPECT_EQ(log.calls, (std::vector<std::string>{"zero", "run", "finish", "release", "sum"}));
}

TEST(RunStep, AMissingRequiredPhaseIsAnInternalError) {
  PhaseLog log;
  sdk::StepPhases p = log.phases();
  p.update = nullptr;
  try {
    (void)sdk::run_step(sdk::StepArgs{}, {}, p);
    FAIL() << "accepted without update";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INTERNAL);
  }
  EXPECT_TRUE(log.calls.empty());
}

}  // namespace
}  // namespace tessera::test

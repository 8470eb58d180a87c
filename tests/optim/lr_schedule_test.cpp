// Warm-up and cosine decay at their boundaries.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "tessera/core/optim/lr_schedule.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

TEST(LrSchedule, LinearWarmupReachesBaseAtWarmupSteps) {
  const LrSchedule s(0.1, 10, 110, 0.0);
  EXPECT_FLOAT_EQ(s.lr(1), 0.01F);  // 0.1 * 1 / 10
  EXPECT_FLOAT_EQ(s.lr(5), 0.05F);  // 0.1 * 5 / 10
  EXPECT_FLOAT_EQ(s.lr(10), 0.1F);  // end of warm-up: the base rate
}

TEST(LrSchedule, CosineDecayMidpointAndEnd) {
  const LrSchedule s(0.1, 10, 110, 0.0);
  // p = (60 - 10) / 100 = 0.5: (1 + cos(pi / 2)) / 2 = 0.5
  EXPECT_NEAR(s.lr(60), 0.05, 1e-7);
  // p = 0.25: 0.1 * (1 + cos(pi / 4)) / 2
  EXPECT_NEAR(s.lr(35), 0.1 * (1.0 + std::cos(std::numbers::pi / 4)) / 2.0, 1e-7);
  EXPECT_FLOAT_EQ(s.lr(110), 0.0F);  // total_steps: min_lr
  EXPECT_FLOAT_EQ(s.lr(500), 0.0F);  // past the end: stays at min_lr
  EXPECT_LT(s.lr(11), 0.1F);         // the decay starts right after warm-up
  EXPECT_GT(s.lr(109), 0.0F);
}

TEST(LrSchedule, DecaysToMinLr) {
  const LrSchedule s(1.0, 0, 100, 0.1);
  // No warm-up: step 50 is p = 0.5, halfway between 1.0 and 0.1.
  EXPECT_NEAR(s.lr(50), 0.55, 1e-6);
  EXPECT_FLOAT_EQ(s.lr(100), 0.1F);
  for (int64_t step = 2; step <= 100; ++step) {
    EXPECT_LE(s.lr(step), s.lr(step - 1)) << "step " << step;
  }
}

TEST(LrSchedule, WarmupOverTheWholeRun) {
  const LrSchedule s(0.2, 4, 4, 0.0);
  EXPECT_FLOAT_EQ(s.lr(2), 0.1F);
  EXPECT_FLOAT_EQ(s.lr(4), 0.2F);  // warm-up wins at its own last step
  EXPECT_FLOAT_EQ(s.lr(5), 0.0F);
}

TEST(LrSchedule, FromConfigSections) {
  OptimizerSection opt;
  opt.lr = 0.5;
  opt.warmup_steps = 2;
  RunSection run;
  run.steps = 12;
  const LrSchedule s = make_lr_schedule(opt, run);
  EXPECT_FLOAT_EQ(s.lr(1), 0.25F);
  EXPECT_FLOAT_EQ(s.lr(7), 0.25F);  // p = 0.5
  EXPECT_FLOAT_EQ(s.lr(12), 0.0F);
}

TEST(LrSchedule, RejectsInvalidSettings) {
  EXPECT_THROW(LrSchedule(0.0, 0, 10), Error);
  EXPECT_THROW(LrSchedule(0.1, -1, 10), Error);
  EXPECT_THROW(LrSchedule(0.1, 0, 0), Error);
  EXPECT_THROW(LrSchedule(0.1, 11, 10), Error);
  EXPECT_THROW(LrSchedule(0.1, 0, 10, 0.2), Error);
  const LrSchedule s(0.1, 0, 10);
  try {
    (void)s.lr(0);
    FAIL() << "step 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera

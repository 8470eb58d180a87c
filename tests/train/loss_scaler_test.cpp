// f16's dynamic loss scaling: an overflow halves the scale and restarts the
// count, `window` clean steps double it, and a scale that would have to go
// below 2^-24 stops the run with a message that says why.
#include "tessera/core/train/loss_scaler.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace {

TEST(LossScaler, OverflowsHalveAndCleanWindowsDouble) {
  LossScaler s(65536.0, 3);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.update(true), LossScaler::Change::lowered);
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.update(false), LossScaler::Change::kept);
  EXPECT_EQ(s.update(false), LossScaler::Change::kept);
  EXPECT_EQ(s.clean_steps(), 2);
  EXPECT_EQ(s.update(true), LossScaler::Change::lowered);  // restarts the count
  EXPECT_EQ(s.clean_steps(), 0);
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_EQ(s.update(false), LossScaler::Change::kept);
  EXPECT_EQ(s.update(false), LossScaler::Change::kept);
  EXPECT_EQ(s.update(false), LossScaler::Change::raised);
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.clean_steps(), 0);
}

TEST(LossScaler, TheScaleStaysBetweenItsBounds) {
  LossScaler top(LossScaler::kMaxScale, 1);
  EXPECT_EQ(top.update(false), LossScaler::Change::kept);
  EXPECT_EQ(top.scale(), LossScaler::kMaxScale);

  LossScaler s(1.0, 10);
  for (int i = 0; i < 24; ++i) ASSERT_EQ(s.update(true), LossScaler::Change::lowered) << i;
  EXPECT_EQ(s.scale(), LossScaler::kMinScale);
  try {
    (void)s.update(true);
    FAIL() << "expected the run to stop";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overflow at every loss scale down to 2^-24"),
              std::string::npos)
        << e.what();
  }
}

TEST(LossScaler, RefusesAScaleBelowOneOrAnEmptyWindow) {
  EXPECT_THROW(LossScaler(0.5, 10), Error);
  EXPECT_THROW(LossScaler(std::numeric_limits<double>::infinity(), 10), Error);
  EXPECT_THROW(LossScaler(1024.0, 0), Error);
}

}  // namespace
}  // namespace tessera::train

// Accuracy of the vectorisable exp and tanh used by the GELU kernels,
// measured against libm in double over dense grids.
#include "tessera/models/fast_math.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tessera::model::kernels {
namespace {

TEST(FastMath, ExpIsWithinTwoUlpOverTheFiniteRange) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0037f) {
    const double exact = std::exp(static_cast<double>(x));
    const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
    worst = std::max(worst, std::abs(exp_approx(x) - exact) / ulp);
  }
  EXPECT_LE(worst, 2.0);
}

TEST(FastMath, ExpClampsOutsideTheFiniteRange) {
  EXPECT_TRUE(std::isfinite(exp_approx(1000.0f)));
  EXPECT_GT(exp_approx(1000.0f), 1e38f);
  EXPECT_GE(exp_approx(-1000.0f), 0.0f);
  EXPECT_LT(exp_approx(-1000.0f), 1e-37f);
}

TEST(FastMath, TanhIsWithinOnePointFiveE7Absolute) {
  double worst = 0;
  for (float x = -12.0f; x <= 12.0f; x += 0.00071f) {
    worst = std::max(worst, std::abs(tanh_approx(x) - std::tanh(static_cast<double>(x))));
  }
  EXPECT_LE(worst, 1.5e-7);
}

TEST(FastMath, TanhIsOddSaturatesAndKeepsZero) {
  for (const float x : {1e-6f, 0.3f, 2.0f, 8.5f, 40.0f}) {
    EXPECT_EQ(tanh_approx(-x), -tanh_approx(x)) << x;
  }
  EXPECT_EQ(tanh_approx(0.0f), 0.0f);
  EXPECT_EQ(tanh_approx(50.0f), 1.0f);
  EXPECT_EQ(tanh_approx(-std::numeric_limits<float>::max()), -1.0f);
}

}  // namespace
}  // namespace tessera::model::kernels

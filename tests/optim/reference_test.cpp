// Each rule against hand-computed steps: the expected values are computed
// here from the written-out formulas, in double, independently of the
// library's f32 loop.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/core/optim/optimizer.hpp"

namespace tessera {
namespace {

// Gradients of three successive steps for three parameters.
const std::vector<std::vector<float>> kGrads = {
    {0.1F, -0.2F, 0.3F}, {0.05F, 0.4F, -0.1F}, {-0.3F, 0.1F, 0.2F}};
const std::vector<float> kInit = {1.0F, -2.0F, 0.5F};

std::vector<float> run_steps(Optimizer& opt, float lr, int steps) {
  std::vector<float> params = kInit;
  OptimizerState state = opt.make_state(params.size());
  for (int s = 1; s <= steps; ++s) {
    opt.step(params, kGrads[static_cast<size_t>(s - 1)], state, s, lr);
  }
  return params;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-6 * std::max(1.0, std::abs(want[i]))) << "element " << i;
  }
}

TEST(OptimizerReference, SgdThreeStepsWithWeightDecay) {
  OptimizerParams hp;
  hp.weight_decay = 0.01;
  auto opt = make_optimizer("sgd", hp);
  const double lr = 0.1;
  std::vector<double> p(kInit.begin(), kInit.end());
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < p.size(); ++i) {
      // p <- p - lr * (g + wd * p)
      p[i] -= lr * (kGrads[s][i] + 0.01 * p[i]);
    }
  }
  expect_close(run_steps(*opt, 0.1F, 3), p);
}

TEST(OptimizerReference, MomentumFirstStepsByHand) {
  OptimizerParams hp;
  hp.momentum = 0.9;
  auto opt = make_optimizer("momentum", hp);
  std::vector<float> p = {1.0F};
  OptimizerState state = opt->make_state(1);
  const std::vector<float> g = {0.5F};
  // step 1: b = g = 0.5; p = 1 - 0.1 * 0.5 = 0.95
  opt->step(p, g, state, 1, 0.1F);
  EXPECT_NEAR(p[0], 0.95, 1e-7);
  EXPECT_NEAR(state.slot(0)[0], 0.5, 1e-7);
  // step 2: b = 0.9 * 0.5 + 0.5 = 0.95; p = 0.95 - 0.1 * 0.95 = 0.855
  opt->step(p, g, state, 2, 0.1F);
  EXPECT_NEAR(p[0], 0.855, 1e-6);
  EXPECT_NEAR(state.slot(0)[0], 0.95, 1e-6);
}

TEST(OptimizerReference, MomentumThreeStepsWithDampening) {
  OptimizerParams hp;
  hp.momentum = 0.8;
  hp.dampening = 0.25;
  auto opt = make_optimizer("momentum", hp);
  std::vector<double> p(kInit.begin(), kInit.end());
  std::vector<double> b(p.size(), 0.0);
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < p.size(); ++i) {
      // step 1: b = g; later b = mu * b + (1 - dampening) * g; p -= lr * b
      b[i] = s == 0 ? kGrads[s][i] : 0.8 * b[i] + 0.75 * kGrads[s][i];
      p[i] -= 0.05 * b[i];
    }
  }
  expect_close(run_steps(*opt, 0.05F, 3), p);
}

TEST(OptimizerReference, NesterovFirstStepByHand) {
  OptimizerParams hp;
  hp.momentum = 0.9;
  hp.nesterov = true;
  auto opt = make_optimizer("momentum", hp);
  std::vector<float> p = {1.0F};
  OptimizerState state = opt->make_state(1);
  // b = 0.5; direction = g + mu * b = 0.5 + 0.45 = 0.95; p = 1 - 0.1 * 0.95
  opt->step(p, std::vector<float>{0.5F}, state, 1, 0.1F);
  EXPECT_NEAR(p[0], 0.905, 1e-6);
}

// Adam with bias correction, at step t (1-based):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
std::vector<double> adam_reference(double lr, double wd, bool decoupled, int steps) {
  const double b1 = 0.9;
  const double b2 = 0.999;
  const double eps = 1e-8;
  std::vector<double> p(kInit.begin(), kInit.end());
  std::vector<double> m(p.size(), 0.0);
  std::vector<double> v(p.size(), 0.0);
  for (int s = 0; s < steps; ++s) {
    const int t = s + 1;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = kGrads[s][i];
      if (decoupled) {
        p[i] *= 1.0 - lr * wd;  // AdamW: decay the weights, not the gradient
      } else {
        g += wd * p[i];  // Adam: L2 term in the gradient
      }
      m[i] = b1 * m[i] + (1.0 - b1) * g;
      v[i] = b2 * v[i] + (1.0 - b2) * g * g;
      const double denom = std::sqrt(v[i]) / std::sqrt(1.0 - std::pow(b2, t)) + eps;
      p[i] -= lr / (1.0 - std::pow(b1, t)) * m[i] / denom;
    }
  }
  return p;
}

TEST(OptimizerReference, AdamFirstStepMovesByLrTimesSign) {
  // After bias correction m_hat = g and v_hat = g^2, so the first update is
  // lr * g / (|g| + eps), i.e. lr in the direction of -sign(g).
  auto opt = make_optimizer("adam", OptimizerParams{});
  const std::vector<float> got = run_steps(*opt, 0.001F, 1);
  EXPECT_NEAR(got[0], 1.0 - 0.001, 1e-7);
  EXPECT_NEAR(got[1], -2.0 + 0.001, 1e-7);
  EXPECT_NEAR(got[2], 0.5 - 0.001, 1e-7);
}

TEST(OptimizerReference, AdamThreeSteps) {
  auto opt = make_optimizer("adam", OptimizerParams{});
  expect_close(run_steps(*opt, 0.01F, 3), adam_reference(0.01, 0.0, false, 3));
}

TEST(OptimizerReference, AdamWithL2ThreeSteps) {
  OptimizerParams hp;
  hp.weight_decay = 0.1;
  auto opt = make_optimizer("adam", hp);
  expect_close(run_steps(*opt, 0.01F, 3), adam_reference(0.01, 0.1, false, 3));
}

TEST(OptimizerReference, AdamWThreeStepsDecoupledDecay) {
  OptimizerParams hp;
  hp.weight_decay = 0.1;
  auto opt = make_optimizer("adamw", hp);
  const std::vector<float> got = run_steps(*opt, 0.01F, 3);
  expect_close(got, adam_reference(0.01, 0.1, true, 3));
  // Decoupled and L2 decay really differ.
  const std::vector<double> l2 = adam_reference(0.01, 0.1, false, 3);
  EXPECT_GT(std::abs(got[0] - l2[0]), 1e-5);
}

TEST(OptimizerReference, AdamWFirstStepByHand) {
  OptimizerParams hp;
  hp.weight_decay = 0.1;
  auto opt = make_optimizer("adamw", hp);
  std::vector<float> p = {1.0F};
  OptimizerState state = opt->make_state(1);
  // p = 1 * (1 - 0.01 * 0.1) = 0.999, then - 0.01 * 0.1 / (0.1 + 1e-8) = 0.989
  opt->step(p, std::vector<float>{0.1F}, state, 1, 0.01F);
  EXPECT_NEAR(p[0], 0.989, 1e-6);
  EXPECT_NEAR(state.slot(0)[0], 0.01, 1e-8);   // m = 0.1 * g
  EXPECT_NEAR(state.slot(1)[0], 1e-5, 1e-11);  // v = 0.001 * g^2
}

}  // namespace
}  // namespace tessera

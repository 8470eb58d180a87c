// make_optimizer from names and from [optimizer]; argument checks of step.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/core/optim/optimizer.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

std::string error_of(const auto& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OptimizerFactory, SlotsAndStateBytesPerRule) {
  const std::vector<std::pair<std::string, size_t>> expected = {
      {"sgd", 0}, {"momentum", 1}, {"adam", 2}, {"adamw", 2}};
  for (const auto& [name, slots] : expected) {
    auto opt = make_optimizer(name, OptimizerParams{});
    EXPECT_EQ(opt->name(), name);
    EXPECT_EQ(opt->slots(), slots) << name;
    EXPECT_EQ(opt->slot_names().size(), slots) << name;
    EXPECT_EQ(opt->state_bytes(1000), slots * 1000 * sizeof(float)) << name;
    const OptimizerState state = opt->make_state(10);
    EXPECT_EQ(state.slots(), slots);
    EXPECT_EQ(state.elements(), 10U);
  }
  const OptimizerState adam = make_optimizer("adam", OptimizerParams{})->make_state(4);
  EXPECT_EQ(adam.slot_name(0), "exp_avg");
  EXPECT_EQ(adam.slot_name(1), "exp_avg_sq");
  EXPECT_EQ(adam.slot(1).size(), 4U);
}

TEST(OptimizerFactory, FromConfigSection) {
  OptimizerSection section;  // defaults: adamw
  EXPECT_EQ(make_optimizer(section)->name(), "adamw");
  section.name = "momentum";
  EXPECT_EQ(make_optimizer(section)->name(), "momentum");
}

TEST(OptimizerFactory, UnknownNameListsValidOnes) {
  OptimizerSection section;
  section.name = "lamb";
  const std::string msg = error_of([&] { (void)make_optimizer(section); });
  EXPECT_NE(msg.find("'lamb'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sgd, momentum, adam, adamw"), std::string::npos) << msg;
}

TEST(OptimizerFactory, RejectsBadHyperParameters) {
  OptimizerParams hp;
  hp.beta1 = 1.0;
  EXPECT_NE(error_of([&] { (void)make_optimizer("adam", hp); }).find("beta1"), std::string::npos);
  hp = OptimizerParams{};
  hp.eps = 0.0;
  EXPECT_NE(error_of([&] { (void)make_optimizer("adamw", hp); }).find("eps"), std::string::npos);
  hp = OptimizerParams{};
  hp.momentum = -0.1;
  EXPECT_NE(error_of([&] { (void)make_optimizer("momentum", hp); }).find("momentum"),
            std::string::npos);
  hp = OptimizerParams{};
  hp.nesterov = true;
  hp.dampening = 0.1;
  EXPECT_NE(error_of([&] { (void)make_optimizer("momentum", hp); }).find("nesterov"),
            std::string::npos);
  hp = OptimizerParams{};
  hp.weight_decay = -1.0;
  EXPECT_NE(error_of([&] { (void)make_optimizer("sgd", hp); }).find("weight_decay"),
            std::string::npos);
}

TEST(OptimizerFactory, StepRejectsMismatchedArgumentsWithoutTouchingParams) {
  auto opt = make_optimizer("adam", OptimizerParams{});
  std::vector<float> params = {1.0F, 2.0F};
  const std::vector<float> grads = {0.1F, 0.1F};
  OptimizerState small = opt->make_state(1);
  EXPECT_NE(error_of([&] { opt->step(params, grads, small, 1, 0.1F); }).find("state covers 1"),
            std::string::npos);
  OptimizerState wrong_rule = make_optimizer("momentum", OptimizerParams{})->make_state(2);
  EXPECT_THROW(opt->step(params, grads, wrong_rule, 1, 0.1F), Error);
  OptimizerState ok = opt->make_state(2);
  EXPECT_THROW(opt->step(params, std::vector<float>{0.1F}, ok, 1, 0.1F), Error);
  EXPECT_NE(error_of([&] { opt->step(params, grads, ok, 0, 0.1F); }).find("step 0"),
            std::string::npos);
  EXPECT_THROW(opt->step(params, grads, ok, 1, -0.1F), Error);
  EXPECT_EQ(params, (std::vector<float>{1.0F, 2.0F}));
  EXPECT_EQ(ok.slot(0)[0], 0.0F);
}

}  // namespace
}  // namespace tessera

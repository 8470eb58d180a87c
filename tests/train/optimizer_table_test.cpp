// The optimizer table (tessera_optimizer_api over Optimizer): updating
// [0, n) at once equals updating it as ranges of one state with offsets,
// bit for bit; state memory is counted per rank and released; names and
// errors cross as the ABI says.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "tessera/core/logging.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "train/train_util.hpp"

namespace tessera::train {
namespace {

using test::last_error;
using test::random_values;
using test::same_bits;

std::unique_ptr<Optimizer> make(const std::string& name) {
  OptimizerParams hp;
  hp.weight_decay = 0.02;
  hp.momentum = name == "momentum" ? 0.8 : 0.9;
  return make_optimizer(name, hp);
}

// Every slot of `state` concatenated.
std::vector<float> slots_of(const tessera_optimizer* opt, tessera_optim_state* state,
                            std::size_t n) {
  const tessera_optimizer_api* api = optimizer_api();
  std::vector<float> out;
  for (int32_t k = 0; k < api->num_slots(opt); ++k) {
    const float* s = api->state_slot(state, k);
    out.insert(out.end(), s, s + n);
  }
  return out;
}

class OptimizerTableRule : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimizerTableRule, RangesWithOffsetsEqualOneWholeStep) {
  const auto opt = make(GetParam());
  const tessera_optimizer_api* api = optimizer_api();
  const tessera_optimizer* copt = as_c_optimizer(*opt);
  const std::size_t n = 1001;
  const std::size_t cut = 389;

  std::vector<float> whole = random_values(n, 3);
  std::vector<float> ranged = whole;
  std::vector<float> direct = whole;
  tessera_optim_state* whole_state = nullptr;
  tessera_optim_state* ranged_state = nullptr;
  ASSERT_EQ(api->state_create(copt, n, &whole_state), TESSERA_OK) << last_error();
  ASSERT_EQ(api->state_create(copt, n, &ranged_state), TESSERA_OK) << last_error();
  OptimizerState direct_state = opt->make_state(n);

  for (int64_t step = 1; step <= 5; ++step) {
    const std::vector<float> grads = random_values(n, 50 + static_cast<uint32_t>(step), 0.2F);
    const float lr = 0.03F / static_cast<float>(step);
    ASSERT_EQ(api->step(copt, whole_state, 0, whole.data(), grads.data(), n, step, lr), TESSERA_OK)
        << last_error();
    // The second range first: order must not matter either.
    ASSERT_EQ(api->step(copt, ranged_state, cut, ranged.data() + cut, grads.data() + cut, n - cut,
                        step, lr),
              TESSERA_OK)
        << last_error();
    ASSERT_EQ(api->step(copt, ranged_state, 0, ranged.data(), grads.data(), cut, step, lr),
              TESSERA_OK)
        << last_error();
    opt->step(direct, grads, direct_state, step, lr);
  }
  EXPECT_TRUE(same_bits(whole, ranged));
  EXPECT_TRUE(same_bits(whole, direct));
  EXPECT_TRUE(same_bits(slots_of(copt, whole_state, n), slots_of(copt, ranged_state, n)));
  std::vector<float> direct_slots;
  for (std::size_t k = 0; k < direct_state.slots(); ++k) {
    const auto s = direct_state.slot(k);
    direct_slots.insert(direct_slots.end(), s.begin(), s.end());
  }
  EXPECT_TRUE(same_bits(slots_of(copt, whole_state, n), direct_slots));
  if (opt->slots() > 0) {
    EXPECT_NE(direct_slots[0], 0.0F) << "state was not updated";
  }
  api->state_destroy(whole_state);
  api->state_destroy(ranged_state);
}

TEST_P(OptimizerTableRule, CoreStepWithOffsetEqualsSeparateStates) {
  // The core API behind the table: one state with offsets versus one state
  // per range (the existing whole-vs-shards property), bit for bit.
  const auto opt = make(GetParam());
  const std::size_t n = 257;
  const std::size_t cut = 100;
  std::vector<float> a = random_values(n, 8);
  std::vector<float> b = a;
  OptimizerState one = opt->make_state(n);
  OptimizerState first = opt->make_state(cut);
  OptimizerState second = opt->make_state(n - cut);
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> g = random_values(n, 90 + static_cast<uint32_t>(step), 0.5F);
    const std::span<float> as(a);
    const std::span<const float> gs(g);
    opt->step(as.first(cut), gs.first(cut), one, std::size_t{0}, step, 0.01F);
    opt->step(as.subspan(cut), gs.subspan(cut), one, cut, step, 0.01F);
    const std::span<float> bs(b);
    opt->step(bs.first(cut), gs.first(cut), first, step, 0.01F);
    opt->step(bs.subspan(cut), gs.subspan(cut), second, step, 0.01F);
  }
  EXPECT_TRUE(same_bits(a, b));
  for (std::size_t k = 0; k < one.slots(); ++k) {
    EXPECT_TRUE(same_bits(one.slot(k).first(cut), first.slot(k)));
    EXPECT_TRUE(same_bits(one.slot(k).subspan(cut), second.slot(k)));
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, OptimizerTableRule,
                         ::testing::Values("sgd", "momentum", "adam", "adamw"));

TEST(OptimizerTable, NamesAndSlots) {
  const auto adamw = make("adamw");
  const tessera_optimizer_api* api = optimizer_api();
  const tessera_optimizer* c = as_c_optimizer(*adamw);
  EXPECT_EQ(api->struct_size, sizeof(tessera_optimizer_api));
  EXPECT_STREQ(api->name(c), "adamw");
  EXPECT_EQ(api->num_slots(c), 2);
  EXPECT_STREQ(api->slot_name(c, 0), "exp_avg");
  EXPECT_STREQ(api->slot_name(c, 1), "exp_avg_sq");
  EXPECT_EQ(api->slot_name(c, 2), nullptr);
  EXPECT_EQ(api->slot_name(c, -1), nullptr);

  const auto sgd = make("sgd");
  EXPECT_EQ(api->num_slots(as_c_optimizer(*sgd)), 0);
  tessera_optim_state* state = nullptr;
  ASSERT_EQ(api->state_create(c, 4, &state), TESSERA_OK);
  ASSERT_NE(api->state_slot(state, 1), nullptr);
  EXPECT_EQ(api->state_slot(state, 1)[3], 0.0F);
  EXPECT_EQ(api->state_slot(state, 2), nullptr);
  api->state_destroy(state);
}

TEST(OptimizerTable, StateBytesAreTrackedForTheCreatingRank) {
  MemoryTracker& tracker = MemoryTracker::instance();
  tracker.reset(3);
  const auto adam = make("adam");
  const tessera_optimizer_api* api = optimizer_api();
  tessera_optim_state* state = nullptr;
  std::thread rank2([&] {
    const ThreadRankGuard guard(2);
    EXPECT_EQ(api->state_create(as_c_optimizer(*adam), 1000, &state), TESSERA_OK);
  });
  rank2.join();
  EXPECT_EQ(tracker.stats(2).current[TESSERA_MEM_OPTIMIZER], 2 * 1000 * 4);
  EXPECT_EQ(tracker.stats(0).current[TESSERA_MEM_OPTIMIZER], 0);
  // Destroyed on another thread (no rank): rank 2's bytes are released.
  api->state_destroy(state);
  EXPECT_EQ(tracker.stats(2).current[TESSERA_MEM_OPTIMIZER], 0);
  EXPECT_EQ(tracker.stats(2).peak[TESSERA_MEM_OPTIMIZER], 2 * 1000 * 4);
  EXPECT_EQ(tracker.stats(-1).current[TESSERA_MEM_OPTIMIZER], 0);
  tracker.reset(1);
}

TEST(OptimizerTable, BadStepsReturnStatusAndMessage) {
  const auto adam = make("adam");
  const tessera_optimizer_api* api = optimizer_api();
  const tessera_optimizer* c = as_c_optimizer(*adam);
  tessera_optim_state* state = nullptr;
  ASSERT_EQ(api->state_create(c, 10, &state), TESSERA_OK);
  std::vector<float> p(6, 1.0F);
  const std::vector<float> g(6, 0.5F);
  EXPECT_EQ(api->step(c, state, 5, p.data(), g.data(), 6, 1, 0.1F), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("optimizer 'adam' step"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("[5, 11) is outside the state of 10"), std::string::npos)
      << last_error();
  EXPECT_EQ(p[0], 1.0F) << "a refused step modified the parameters";
  EXPECT_EQ(api->step(c, state, 0, p.data(), g.data(), 6, 1, -1.0F), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("learning rate"), std::string::npos) << last_error();
  EXPECT_EQ(api->step(c, state, 0, p.data(), g.data(), 6, 0, 0.1F), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("step 0"), std::string::npos) << last_error();
  EXPECT_EQ(api->step(c, nullptr, 0, p.data(), g.data(), 6, 1, 0.1F), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("state is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(api->step(c, state, 4, p.data(), g.data(), 6, 1, 0.1F), TESSERA_OK) << last_error();
  EXPECT_NE(p[0], 1.0F);
  api->state_destroy(state);
}

}  // namespace
}  // namespace tessera::train

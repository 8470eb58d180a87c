// Updating a tensor whole or as uneven shards (each with its own state)
// must give bit-identical parameters and state: what lets ZeRO/FSDP match a
// single process exactly.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tessera/core/optim/optimizer.hpp"

namespace tessera {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0F, scale);
  std::vector<float> out(n);
  for (float& x : out) {
    x = dist(gen);
  }
  return out;
}

bool bit_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

class ShardTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ShardTest, WholeAndThreeUnevenShardsAreBitIdentical) {
  OptimizerParams hp;
  hp.weight_decay = 0.01;
  auto opt = make_optimizer(GetParam(), hp);
  const size_t n = 1003;  // odd, so vectorised loops leave scalar tails
  const std::vector<size_t> cuts = {0, 137, 601, n};

  std::vector<float> whole = random_values(n, 1, 1.0F);
  std::vector<float> sharded = whole;
  OptimizerState whole_state = opt->make_state(n);
  std::vector<OptimizerState> shard_states;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    shard_states.push_back(opt->make_state(cuts[k + 1] - cuts[k]));
    EXPECT_EQ(shard_states.back().bytes(), opt->state_bytes(cuts[k + 1] - cuts[k]));
  }

  for (int64_t step = 1; step <= 6; ++step) {
    const std::vector<float> grads = random_values(n, 100 + static_cast<uint32_t>(step), 0.3F);
    const float lr = 0.01F / static_cast<float>(step);
    opt->step(whole, grads, whole_state, step, lr);
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const size_t len = cuts[k + 1] - cuts[k];
      opt->step(std::span<float>(sharded).subspan(cuts[k], len),
                std::span<const float>(grads).subspan(cuts[k], len), shard_states[k], step, lr);
    }
  }

  EXPECT_TRUE(bit_equal(whole, sharded));
  EXPECT_NE(whole, random_values(n, 1, 1.0F));  // the parameters did move
  for (size_t slot = 0; slot < opt->slots(); ++slot) {
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const size_t len = cuts[k + 1] - cuts[k];
      EXPECT_TRUE(
          bit_equal(whole_state.slot(slot).subspan(cuts[k], len), shard_states[k].slot(slot)))
          << "slot " << whole_state.slot_name(slot) << ", shard " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllRules, ShardTest, ::testing::Values("sgd", "momentum", "adam", "adamw"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });

}  // namespace
}  // namespace tessera

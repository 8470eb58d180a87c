// `ddp` on 1 to 4 ranks against `none` on one rank, on mlp, gpt and llama:
// same model, same global batch, 20 AdamW steps with clipping. The final
// parameters must agree to a relative difference of 1e-5 (max |ddp - none|
// / max |none| per tensor) and every rank must hold bit-identical parameters
// and optimizer state.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "run_support.hpp"
#include "strategy_support.hpp"

namespace tessera::test {
namespace {

// The `none` run of `model` on `batch` examples per step, computed once.
const train::RunResult& reference(const std::string& model, int64_t batch, int64_t steps = 20) {
  static std::map<std::string, train::RunResult> cache;
  const std::string key = model + "/" + std::to_string(batch) + "/" + std::to_string(steps);
  auto it = cache.find(key);
  if (it == cache.end()) {
    RunSpec spec;
    spec.model = model;
    spec.strategy = "none";
    spec.batch = batch;
    spec.steps = steps;
    it = cache.emplace(key, run(spec)).first;
  }
  return it->second;
}

struct DdpCase {
  std::string model;
  int world;
  int64_t batch;  // global batch; not always divisible by world
};

class DdpEquivalence : public ::testing::TestWithParam<DdpCase> {};

TEST_P(DdpEquivalence, MatchesNoneOnOneRankAndRanksAgree) {
  const DdpCase c = GetParam();
  RunSpec spec;
  spec.model = c.model;
  spec.world = c.world;
  spec.batch = c.batch;
  const train::RunResult result = run(spec);
  const train::RunResult& ref = reference(c.model, c.batch);
  ASSERT_EQ(result.last_step, 20);
  ASSERT_EQ(result.final_state.size(), static_cast<size_t>(c.world));
  ASSERT_EQ(ref.final_state.size(), 1U);

  for (int r = 1; r < c.world; ++r) {
    EXPECT_EQ(
        first_bit_difference(result.final_state[static_cast<size_t>(r)], result.final_state[0]), "")
        << "rank " << r << " differs from rank 0";
  }
  EXPECT_EQ(tensor_names(result.final_state[0]), tensor_names(ref.final_state[0]));
  std::string worst;
  const double diff = max_param_rel_diff(result.final_state[0], ref.final_state[0], &worst);
  EXPECT_LE(diff, kTolerance) << "largest difference in " << worst;
  EXPECT_NEAR(result.final_loss, ref.final_loss, 1e-4 * std::fabs(ref.final_loss));
}

INSTANTIATE_TEST_SUITE_P(Worlds, DdpEquivalence,
                         ::testing::Values(DdpCase{"mlp", 1, 11}, DdpCase{"mlp", 2, 11},
                                           DdpCase{"mlp", 3, 11}, DdpCase{"mlp", 4, 11},
                                           DdpCase{"gpt", 1, 10}, DdpCase{"gpt", 2, 10},
                                           DdpCase{"gpt", 3, 10}, DdpCase{"gpt", 4, 10},
                                           DdpCase{"llama", 1, 10}, DdpCase{"llama", 2, 10},
                                           DdpCase{"llama", 3, 10}, DdpCase{"llama", 4, 10}),
                         [](const ::testing::TestParamInfo<DdpCase>& param_info) {
                           return param_info.param.model + "_world" +
                                  std::to_string(param_info.param.world) + "_batch" +
                                  std::to_string(param_info.param.batch);
                         });

// The comparison above means something only if training moves the
// parameters far more than the tolerance.
TEST(DdpEquivalence, ReferenceTrainingMovesParameters) {
  for (const std::string model : {"mlp", "gpt", "llama"}) {
    const int64_t batch = model == "mlp" ? 11 : 10;
    const double moved = max_param_rel_diff(reference(model, batch).final_state[0],
                                            reference(model, batch, 1).final_state[0]);
    EXPECT_GT(moved, 1000 * kTolerance) << model;
  }
}

}  // namespace
}  // namespace tessera::test

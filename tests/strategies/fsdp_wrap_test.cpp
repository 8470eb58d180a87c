// `fsdp` wrapping, micro-batches, prefetch and bytes sent. wrap =
// "min_params" merges consecutive model units into FSDP units of at least
// min_params parameters: the run still equals `none` on one rank (1e-5),
// the shards are the padded pieces of the merged units, and each FSDP unit
// costs one allgather per pass and one reduce-scatter, so fewer collectives
// run and the bytes sent per step are exactly those of the merged units.
// Gradient accumulation over two micro-batches matches `none`'s; prefetch
// off changes when the allgathers start, not what they deliver.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "strategy_support.hpp"

namespace tessera::test {
namespace {

struct WrapCase {
  std::string model;
  std::string sharding;
  int world;
  int64_t min_params;
  // The FSDP units min_params makes of the model (gathers of full_shard).
  std::vector<FsdpUnit> wrapped;
};

// mlp: layer0 544, layer1 792, head 125 parameters; gpt: embed 2560, each
// block 12704, head 64 (its matrix is tied to the embedding).
std::vector<WrapCase> wrap_cases() {
  const std::vector<FsdpUnit> mlp_two = {{{"layer0", "layer1"}, 2}, {{"head"}, 1}};
  const std::vector<FsdpUnit> mlp_one = {{{"layer0", "layer1", "head"}, 1}};
  // The head reads the first FSDP unit (the embedding's matrix): that unit
  // stays gathered from its forward to its backward, as the unit run next
  // (block1's neighbours, the head and block0) uses it on either side.
  const std::vector<FsdpUnit> gpt_three = {
      {{"embed", "block0"}, 1}, {{"block1"}, 2}, {{"head"}, 1}};
  return {
      {"mlp", "full_shard", 2, 1000, mlp_two},     {"mlp", "full_shard", 3, 1000, mlp_two},
      {"mlp", "full_shard", 4, 1000000, mlp_one},  {"mlp", "shard_grad_op", 3, 1000, mlp_two},
      {"gpt", "full_shard", 2, 3000, gpt_three},   {"gpt", "full_shard", 4, 3000, gpt_three},
      {"gpt", "hybrid_shard", 4, 3000, gpt_three},
  };
}

std::string wrap_options(const WrapCase& c) {
  std::string o = "sharding_strategy = \"" + c.sharding + "\"\nwrap = \"min_params\"\n" +
                  "min_params = " + std::to_string(c.min_params);
  if (c.sharding == "hybrid_shard") o += "\nshard_group_size = 2";
  return o;
}

class FsdpWrap : public ::testing::TestWithParam<WrapCase> {};

TEST_P(FsdpWrap, MinParamsMatchesNoneWithMergedShards) {
  const WrapCase c = GetParam();
  const train::RunResult& result = cached(spec(c.model, "fsdp", c.world, wrap_options(c)));
  const train::RunResult& none = cached(spec(c.model, "none", 1));
  ASSERT_EQ(result.last_step, 20);
  expect_params_identical(result);
  std::string worst;
  EXPECT_LE(max_param_rel_diff(result.final_state[0], none.final_state[0], &worst), kTolerance)
      << "largest difference in " << worst;
  EXPECT_EQ(tensor_names(merged(result)), tensor_names(none.final_state[0]));

  const std::map<std::string, int64_t> psi = unit_params(none.final_state[0]);
  const int group = c.sharding == "hybrid_shard" ? 2 : c.world;
  const int64_t shard = padded_shard(psi, c.wrapped, group);
  expect_persistent_peaks(result, c.world, {4 * shard, 4 * shard, 8 * shard});

  if (c.sharding != "full_shard") return;
  // Fewer, larger collectives: each FSDP unit's allgathers and its one
  // reduce-scatter, exactly; the per-unit wrapping sends as much (a merged
  // unit gathered as often as its parts) or more (gathers a merged unit
  // saves, and padding).
  const int64_t merged_bytes = sharded_step_bytes(psi, c.wrapped, c.world);
  ASSERT_FALSE(result.logged.empty());
  EXPECT_EQ(result.logged.back().comm_bytes, merged_bytes);
  const train::RunResult& unit = cached(spec(c.model, "fsdp", c.world));
  ASSERT_FALSE(unit.logged.empty());
  EXPECT_EQ(unit.logged.back().comm_bytes, sharded_step_bytes(psi, per_unit(c.model), c.world));
  EXPECT_LE(merged_bytes, unit.logged.back().comm_bytes);
  // Counted by the strategy itself: one allgather per FSDP unit gathered
  // and one reduce-scatter per FSDP unit, against one per model unit.
  int64_t gathers = 0;
  for (const FsdpUnit& g : c.wrapped) gathers += g.gathers;
  const Collectives merged_ops =
      step_collectives(spec(c.model, "fsdp", c.world, wrap_options(c)), 5);
  EXPECT_EQ(merged_ops.allgathers, gathers);
  EXPECT_EQ(merged_ops.reduce_scatters, static_cast<int64_t>(c.wrapped.size()));
  int64_t unit_gathers = 0;
  for (const FsdpUnit& g : per_unit(c.model)) unit_gathers += g.gathers;
  const Collectives unit_ops = step_collectives(spec(c.model, "fsdp", c.world), 5);
  EXPECT_EQ(unit_ops.allgathers, unit_gathers);
  EXPECT_EQ(unit_ops.reduce_scatters, static_cast<int64_t>(per_unit(c.model).size()));
  EXPECT_LT(merged_ops.allgathers, unit_ops.allgathers);
  EXPECT_LT(merged_ops.reduce_scatters, unit_ops.reduce_scatters);
}

INSTANTIATE_TEST_SUITE_P(Policies, FsdpWrap, ::testing::ValuesIn(wrap_cases()),
                         [](const ::testing::TestParamInfo<WrapCase>& param_info) {
                           return param_info.param.model + "_" + param_info.param.sharding +
                                  "_world" + std::to_string(param_info.param.world) + "_min" +
                                  std::to_string(param_info.param.min_params);
                         });

// Per step and rank: full_shard gathers a unit for its forward and its
// backward unless still held; shard_grad_op keeps every unit from its
// forward to its backward (one allgather per unit: the paper's 2Ψ with
// padding); no_shard allreduces the gradients (2(N-1)/N · 4Ψ).
TEST(FsdpBytes, FollowTheShardingStrategy) {
  for (const std::string model : {"mlp", "gpt"}) {
    const std::map<std::string, int64_t> psi =
        unit_params(cached(spec(model, "none", 1)).final_state.at(0));
    const std::vector<FsdpUnit> once = per_unit_once(model);
    for (const int world : {2, 3, 4}) {
      const auto bytes = [&](const std::string& sharding) {
        const train::RunResult& r =
            cached(spec(model, "fsdp", world, "sharding_strategy = \"" + sharding + "\""));
        return r.logged.empty() ? int64_t{-1} : r.logged.back().comm_bytes;
      };
      const std::string where = model + " on " + std::to_string(world) + " ranks";
      EXPECT_EQ(bytes("full_shard"), sharded_step_bytes(psi, per_unit(model), world)) << where;
      EXPECT_EQ(bytes("shard_grad_op"), sharded_step_bytes(psi, once, world)) << where;
      // Each unit's gradients allreduced once, no norm allreduce (G = 1).
      int64_t no_shard = 0;
      for (const auto& [unit, n] : psi) no_shard += 2 * (world - 1) * 4 * n / world;
      EXPECT_EQ(bytes("no_shard"), no_shard) << where;
    }
  }
}

// Gradients accumulate in the gathered gradient buffers over the
// micro-batches and are reduced once, on the last one.
TEST(FsdpMicroBatches, TwoMicroBatchesMatchNone) {
  const struct {
    std::string model;
    std::string options;
    int world;
  } cases[] = {
      {"gpt", "sharding_strategy = \"full_shard\"", 2},
      {"mlp", "sharding_strategy = \"shard_grad_op\"", 3},
      {"gpt", "sharding_strategy = \"hybrid_shard\"\nshard_group_size = 2", 4},
      {"mlp", "sharding_strategy = \"no_shard\"", 2},
      {"mlp", "wrap = \"min_params\"\nmin_params = 1000", 4},
  };
  for (const auto& c : cases) {
    const train::RunResult& result = cached(spec(c.model, "fsdp", c.world, c.options, 2));
    const train::RunResult& none = cached(spec(c.model, "none", 1, "", 2));
    ASSERT_EQ(result.last_step, 20) << c.options;
    expect_params_identical(result);
    std::string worst;
    EXPECT_LE(max_param_rel_diff(result.final_state[0], none.final_state[0], &worst), kTolerance)
        << c.model << " " << c.options << ": largest difference in " << worst;
  }
}

// Prefetching changes when the allgathers start, not what they deliver or
// how many bytes they send.
TEST(FsdpPrefetch, OffKeepsTheBitsAndTheBytes) {
  const struct {
    std::string model;
    std::string options;
    int world;
  } cases[] = {
      {"gpt", "sharding_strategy = \"full_shard\"", 3},
      {"mlp", "sharding_strategy = \"hybrid_shard\"\nshard_group_size = 2", 4},
      {"gpt", "wrap = \"min_params\"\nmin_params = 3000", 2},
  };
  for (const auto& c : cases) {
    const train::RunResult& on = cached(spec(c.model, "fsdp", c.world, c.options));
    const train::RunResult& off =
        cached(spec(c.model, "fsdp", c.world, c.options + "\nprefetch = false"));
    EXPECT_EQ(first_bit_difference(merged(off), merged(on)), "") << c.options;
    expect_params_identical(off);
    ASSERT_FALSE(on.logged.empty());
    ASSERT_FALSE(off.logged.empty());
    EXPECT_EQ(off.logged.back().comm_bytes, on.logged.back().comm_bytes) << c.options;
  }
}

}  // namespace
}  // namespace tessera::test

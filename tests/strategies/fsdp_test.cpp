// `fsdp` against `none`: full_shard, shard_grad_op and no_shard on 1 to 4
// ranks and hybrid_shard on 4 ranks in groups of 2, on the mlp and gpt
// models, 20 AdamW steps with clipping: every rank ends with the same
// parameter bits and within a relative difference of 1e-5 of `none` on one
// rank; tracked persistent memory is 4 + 4 + 8 bytes per element of the
// per-unit padded shards over the sharding group (Σ_u ceil(Ψ_u / G));
// invalid options are refused naming the option.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "run_support.hpp"
#include "tessera/core/config.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

constexpr double kTolerance = 1e-5;

// Runs of `spec`, computed once per distinct configuration.
const train::RunResult& fsdp_cached(const RunSpec& spec) {
  static std::map<std::string, train::RunResult> cache;
  const std::string key = config_toml(spec);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, run(spec)).first;
  return it->second;
}

RunSpec fsdp_spec(const std::string& model, const std::string& strategy, int world,
                  const std::string& options = "") {
  RunSpec spec;
  spec.model = model;
  spec.strategy = strategy;
  spec.world = world;
  spec.batch = 12;  // divisible by 1, 2, 3 and 4
  spec.strategy_options = options;
  return spec;
}

// Σ over units of ceil(Ψ_u / group), Ψ_u summed from the parameter tensors
// "<unit>.<param>" of a one-rank state (unit names hold no dot).
int64_t padded_shard(const train::CollectedState& state, int group) {
  std::map<std::string, int64_t> per_unit;
  for (const std::string& name : param_names(state)) {
    per_unit[name.substr(0, name.find('.'))] += static_cast<int64_t>(state.full(name).size());
  }
  int64_t sum = 0;
  for (const auto& [unit, psi] : per_unit) sum += (psi + group - 1) / group;
  return sum;
}

struct Case {
  std::string model;
  std::string sharding;
  int world;
  int group;  // ranks per sharding group
};

class FsdpEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpEquivalence, MatchesNoneWithShardedMemory) {
  const Case c = GetParam();
  std::string options = "sharding_strategy = \"" + c.sharding + "\"";
  if (c.sharding == "hybrid_shard") options += "\nshard_group_size = " + std::to_string(c.group);
  const train::RunResult& result = fsdp_cached(fsdp_spec(c.model, "fsdp", c.world, options));
  const train::RunResult& none = fsdp_cached(fsdp_spec(c.model, "none", 1));
  ASSERT_EQ(result.last_step, 20);
  ASSERT_EQ(result.final_state.size(), static_cast<size_t>(c.world));

  // Every rank's parameters equal rank 0's and are close to `none`'s.
  const train::CollectedState& first = result.final_state.at(0);
  for (size_t r = 1; r < result.final_state.size(); ++r) {
    for (const std::string& name : param_names(first)) {
      const std::vector<float> a = result.final_state[r].full(name);
      const std::vector<float> b = first.full(name);
      ASSERT_EQ(a.size(), b.size()) << name;
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "rank " << r << " differs from rank 0 in " << name;
    }
  }
  std::string worst;
  const double diff = max_param_rel_diff(first, none.final_state[0], &worst);
  EXPECT_LE(diff, kTolerance) << "largest difference in " << worst;
  EXPECT_NEAR(result.final_loss, none.final_loss, 1e-4 * std::fabs(none.final_loss));

  const int64_t shard = padded_shard(none.final_state[0], c.group);
  ASSERT_EQ(result.memory.size(), static_cast<size_t>(c.world));
  for (size_t r = 0; r < result.memory.size(); ++r) {
    const auto& peak = result.memory[r].peak;
    EXPECT_EQ(peak[TESSERA_MEM_PARAMS], 4 * shard) << "rank " << r;
    EXPECT_EQ(peak[TESSERA_MEM_GRADS], 4 * shard) << "rank " << r;
    EXPECT_EQ(peak[TESSERA_MEM_OPTIMIZER], 8 * shard) << "rank " << r;
    if (c.group > 1) {
      EXPECT_GT(peak[TESSERA_MEM_COMM], 0) << "rank " << r;
    } else {
      EXPECT_EQ(peak[TESSERA_MEM_COMM], 0) << "rank " << r;
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string model : {"mlp", "gpt"}) {
    for (int world = 1; world <= 4; ++world) {
      out.push_back({model, "full_shard", world, world});
      out.push_back({model, "shard_grad_op", world, world});
      out.push_back({model, "no_shard", world, 1});
    }
    out.push_back({model, "hybrid_shard", 4, 2});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Strategies, FsdpEquivalence, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.model + "_" + param_info.param.sharding +
                                  "_world" + std::to_string(param_info.param.world);
                         });

// The error plan_run throws for `spec` (status and message), or none.
std::pair<tessera_status, std::string> plan_error(const RunSpec& spec) {
  try {
    (void)train::plan_run(parse_config(config_toml(spec), "bad.toml"), registry());
  } catch (const Error& e) {
    return {e.status(), e.what()};
  }
  return {TESSERA_OK, ""};
}

TEST(FsdpOptions, BadOptionsAreRefusedByName) {
  const struct {
    std::string options;
    std::string needle;
  } bad[] = {
      {"sharding_strategy = \"zero\"", "sharding_strategy"},
      {"sharding_strategy = \"hybrid_shard\"\nshard_group_size = 3", "shard_group_size"},
      {"shard_group_size = 2", "shard_group_size"},
      {"param_dtype = \"f8\"", "param_dtype"},
      {"reduce_dtype = \"f64\"", "reduce_dtype"},
      {"wrap = \"layer\"", "wrap"},
      {"wrap = \"min_params\"", "min_params"},
      {"wrap = \"min_params\"\nmin_params = -5", "min_params"},
      {"min_params = 100", "min_params"},
  };
  for (const auto& b : bad) {
    const auto [status, msg] = plan_error(fsdp_spec("mlp", "fsdp", 4, b.options));
    EXPECT_NE(status, TESSERA_OK) << b.options;
    EXPECT_NE(msg.find(b.needle), std::string::npos) << b.options << ": " << msg;
  }
  for (const std::string good :
       {"sharding_strategy = \"no_shard\"", "wrap = \"min_params\"\nmin_params = 1",
        "param_dtype = \"bf16\"\nreduce_dtype = \"f16\""}) {
    EXPECT_EQ(plan_error(fsdp_spec("mlp", "fsdp", 4, good)).first, TESSERA_OK) << good;
  }
}

}  // namespace
}  // namespace tessera::test

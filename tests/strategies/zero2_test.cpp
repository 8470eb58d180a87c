// `zero2` on 1 to 4 ranks: 20 AdamW steps with clipping equal `none` on one
// rank (max relative difference 1e-5 per parameter tensor); every rank's
// replicated parameters are bit-identical; the ranks' optimizer pieces
// together cover every optimizer tensor; tracked memory is exactly 4Ψ bytes
// of parameters and 4 (gradients) + 8 (AdamW) bytes per element of the
// per-unit padded shards (Σ_u ceil(Ψ_u / N)); overlap off gives the same
// bits; bf16 gradients on the wire stay close to `none`; gradient
// accumulation over two micro-batches still matches `none`; the bytes sent
// per step are exactly the reduce-scatter and allgather of the padded
// per-unit shards.
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
// bf16 keeps 8 significant bits: each reduce-scatter rounds the summed
// gradients to about 2^-9 relative. AdamW divides by the running gradient
// magnitude, so for parameters whose gradients are small and noisy (the
// layer-norm biases of gpt) those roundings shift the steps by a few
// percent; after 20 steps the worst tensor differs from `none` by about 1%
// of its scale (gpt block1.ln1_b), the rest far less. 3% bounds that with
// margin while still catching a wrong reduction (off by whole gradients).
constexpr double kBf16Tolerance = 3e-2;

// Runs of `spec`, computed once per distinct configuration.
const train::RunResult& cached(const RunSpec& spec) {
  static std::map<std::string, train::RunResult> cache;
  const std::string key = config_toml(spec);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, run(spec)).first;
  return it->second;
}

RunSpec spec_of(const std::string& model, const std::string& strategy, int world,
                const std::string& options = "", int64_t micro_batches = 1) {
  RunSpec spec;
  spec.model = model;
  spec.strategy = strategy;
  spec.world = world;
  spec.batch = model == "mlp" ? 11 : 10;  // not divisible by 2, 3 or 4 everywhere
  spec.micro_batches = micro_batches;
  if (micro_batches > 1) spec.batch = 24;
  spec.strategy_options = options;
  return spec;
}

// Every rank's parameter tensors hold the same bits as rank 0's.
void expect_params_identical(const train::RunResult& result) {
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
}

// The ranks' states merged into one (each rank wrote its optimizer pieces).
train::CollectedState merged(const train::RunResult& result) {
  train::CollectedState all;
  for (const train::CollectedState& s : result.final_state) {
    train::CollectedState copy = s;
    all.merge(std::move(copy));
  }
  return all;
}

// Σ over units of ceil(Ψ_u / world), with Ψ_u summed from the parameter
// tensors "<unit>.<param>" of a one-rank state (unit names hold no dot).
int64_t unit_shard_elements(const train::CollectedState& state, int world) {
  std::map<std::string, int64_t> per_unit;
  for (const std::string& name : param_names(state)) {
    per_unit[name.substr(0, name.find('.'))] += static_cast<int64_t>(state.full(name).size());
  }
  int64_t sum = 0;
  for (const auto& [unit, psi] : per_unit) sum += (psi + world - 1) / world;
  return sum;
}

struct Case {
  std::string model;
  int world;
};

class Zero2Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Zero2Equivalence, MatchesNoneWithShardedGradients) {
  const Case c = GetParam();
  const train::RunResult& result = cached(spec_of(c.model, "zero2", c.world));
  const train::RunResult& none = cached(spec_of(c.model, "none", 1));
  ASSERT_EQ(result.last_step, 20);
  ASSERT_EQ(result.final_state.size(), static_cast<size_t>(c.world));

  expect_params_identical(result);
  std::string worst;
  const double diff = max_param_rel_diff(result.final_state[0], none.final_state[0], &worst);
  EXPECT_LE(diff, kTolerance) << "largest difference in " << worst;
  EXPECT_NEAR(result.final_loss, none.final_loss, 1e-4 * std::fabs(none.final_loss));
  EXPECT_EQ(tensor_names(merged(result)), tensor_names(none.final_state[0]));

  // Persistent memory per rank: replicated parameters, gradients and
  // AdamW's two slots over the per-unit padded shards; the unit gradient
  // buffers are COMM, transient.
  const int64_t shard = unit_shard_elements(none.final_state[0], c.world);
  const auto psi = static_cast<int64_t>(result.plan.parameters);
  EXPECT_GE(shard * c.world, psi);
  ASSERT_EQ(result.memory.size(), static_cast<size_t>(c.world));
  for (size_t r = 0; r < result.memory.size(); ++r) {
    const auto& peak = result.memory[r].peak;
    EXPECT_EQ(peak[TESSERA_MEM_PARAMS], 4 * psi) << "rank " << r;
    EXPECT_EQ(peak[TESSERA_MEM_GRADS], 4 * shard) << "rank " << r;
    EXPECT_EQ(peak[TESSERA_MEM_OPTIMIZER], 8 * shard) << "rank " << r;
    if (c.world > 1) {
      EXPECT_GT(peak[TESSERA_MEM_COMM], 0) << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, Zero2Equivalence,
                         ::testing::Values(Case{"mlp", 1}, Case{"mlp", 2}, Case{"mlp", 3},
                                           Case{"mlp", 4}, Case{"gpt", 1}, Case{"gpt", 2},
                                           Case{"gpt", 3}, Case{"gpt", 4}),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.model + "_world" +
                                  std::to_string(param_info.param.world);
                         });

// Overlap changes when the reduce-scatters are waited for, not what they
// deliver.
TEST(Zero2Options, OverlapOffKeepsTheBits) {
  for (const std::string model : {"mlp", "gpt"}) {
    const train::RunResult& on = cached(spec_of(model, "zero2", 3));
    const train::RunResult& off = cached(spec_of(model, "zero2", 3, "overlap = false"));
    EXPECT_EQ(first_bit_difference(merged(off), merged(on)), "") << model;
    expect_params_identical(off);
  }
}

// bf16 on the wire: ranks stay identical and the result stays close.
TEST(Zero2Options, Bf16GradientsStayClose) {
  for (const std::string model : {"mlp", "gpt"}) {
    const train::RunResult& result = cached(spec_of(model, "zero2", 2, "reduce_dtype = \"bf16\""));
    const train::RunResult& none = cached(spec_of(model, "none", 1));
    ASSERT_EQ(result.last_step, 20);
    expect_params_identical(result);
    std::string worst;
    const double diff = max_param_rel_diff(result.final_state[0], none.final_state[0], &worst);
    EXPECT_LE(diff, kBf16Tolerance) << model << ": largest difference in " << worst;
    // The wire really is 16 bits: the f32 run differs.
    EXPECT_NE(first_bit_difference(merged(result), merged(cached(spec_of(model, "zero2", 2)))), "")
        << model;
  }
}

// Each micro-batch's unit gradients are reduce-scattered and added into the
// shard; the sum over micro-batches matches `none`'s accumulation.
TEST(Zero2Options, MicroBatchesMatchNone) {
  for (const std::string model : {"mlp", "gpt"}) {
    const train::RunResult& result = cached(spec_of(model, "zero2", 2, "", 2));
    const train::RunResult& none = cached(spec_of(model, "none", 1, "", 2));
    ASSERT_EQ(result.last_step, 20);
    expect_params_identical(result);
    std::string worst;
    EXPECT_LE(max_param_rel_diff(result.final_state[0], none.final_state[0], &worst), kTolerance)
        << model << ": largest difference in " << worst;
  }
}

// Per step and rank, with S = Σ_u ceil(Ψ_u / N) the per-unit padded
// shard: each unit's gradients are reduce-scattered once ((N-1)/N of
// N·4·s_u bytes) and its updated parameters allgathered once (as much),
// plus the f64 norm allreduce (2(N-1)/N · 8 bytes, whole bytes):
// 2·(N-1)·4·S, the paper's 2Ψ with padding. With bf16 on the wire the
// reduce-scatter halves.
TEST(Zero2Options, BytesSentAreTheReduceScatterAndTheAllgather) {
  for (const std::string model : {"mlp", "gpt"}) {
    const train::CollectedState& state = cached(spec_of(model, "none", 1)).final_state.at(0);
    for (const int world : {2, 3, 4}) {
      const int64_t shard = unit_shard_elements(state, world);
      const int64_t norm = 2 * (world - 1) * 8 / world;
      const train::RunResult& f32 = cached(spec_of(model, "zero2", world));
      ASSERT_FALSE(f32.logged.empty());
      EXPECT_EQ(f32.logged.back().comm_bytes, 2 * (world - 1) * 4 * shard + norm)
          << model << " on " << world << " ranks";
      if (world == 2) {
        const train::RunResult& bf16 =
            cached(spec_of(model, "zero2", world, "reduce_dtype = \"bf16\""));
        ASSERT_FALSE(bf16.logged.empty());
        EXPECT_EQ(bf16.logged.back().comm_bytes, (world - 1) * (2 + 4) * shard + norm)
            << model << " bf16 on " << world << " ranks";
      }
    }
  }
}

// Returns the message plan_run throws for `spec`, or "" if it accepts it.
std::string plan_error(const RunSpec& spec) {
  try {
    (void)train::plan_run(parse_config(config_toml(spec), "bad.toml"), registry());
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << e.what();
    return e.what();
  }
  return "";
}

TEST(Zero2Options, BadReduceDtypeIsRefused) {
  const std::string msg = plan_error(spec_of("mlp", "zero2", 2, "reduce_dtype = \"f8\""));
  EXPECT_NE(msg.find("reduce_dtype"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f8"), std::string::npos) << msg;
}

TEST(Zero2Options, UnknownOptionIsRefused) {
  const std::string msg = plan_error(spec_of("mlp", "zero2", 2, "prefetch = true"));
  EXPECT_NE(msg.find("prefetch"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tessera::test

// `zero1` on 1 to 4 ranks: 20 AdamW steps with clipping equal `none` on one
// rank (max relative difference 1e-5 per parameter tensor) and `ddp` on the
// same ranks bit for bit (the reduce-scatter sums each element in the same
// order as the allreduce, and an element-wise optimizer makes sharding
// exact); every rank holds bit-identical
// parameters; the ranks' optimizer shards together cover every optimizer
// tensor; tracked memory is 4Ψ parameters, 4Ψ gradients and 8·ceil(Ψ/N)
// optimizer bytes per rank; the communication staging is bounded by two
// buckets, not the model; the options keep the bits; bad options are
// refused before any rank starts.
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
const train::RunResult& cached(const RunSpec& spec) {
  static std::map<std::string, train::RunResult> cache;
  const std::string key = config_toml(spec);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, run(spec)).first;
  return it->second;
}

RunSpec spec_of(const std::string& model, const std::string& strategy, int world,
                const std::string& options = "") {
  RunSpec spec;
  spec.model = model;
  spec.strategy = strategy;
  spec.world = world;
  spec.batch = model == "mlp" ? 11 : 10;  // not divisible by 2, 3 or 4 everywhere
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

// The ranks' states merged into one (each rank wrote its optimizer shard).
train::CollectedState merged(const train::RunResult& result) {
  train::CollectedState all;
  for (const train::CollectedState& s : result.final_state) {
    train::CollectedState copy = s;
    all.merge(std::move(copy));
  }
  return all;
}

struct Case {
  std::string model;
  int world;
};

class Zero1Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Zero1Equivalence, MatchesNoneAndDdpWithShardedOptimizerMemory) {
  const Case c = GetParam();
  const train::RunResult& result = cached(spec_of(c.model, "zero1", c.world));
  const train::RunResult& none = cached(spec_of(c.model, "none", 1));
  const train::RunResult& ddp = cached(spec_of(c.model, "ddp", c.world));
  ASSERT_EQ(result.last_step, 20);
  ASSERT_EQ(result.final_state.size(), static_cast<size_t>(c.world));

  expect_params_identical(result);
  std::string worst;
  const double diff = max_param_rel_diff(result.final_state[0], none.final_state[0], &worst);
  EXPECT_LE(diff, kTolerance) << "largest difference in " << worst;
  EXPECT_NEAR(result.final_loss, none.final_loss, 1e-4 * std::fabs(none.final_loss));

  // The shards cover every optimizer tensor exactly once over the world, and
  // the merged state is ddp's, parameters and optimizer state, bit for bit.
  const train::CollectedState all = merged(result);
  EXPECT_EQ(tensor_names(all), tensor_names(none.final_state[0]));
  EXPECT_EQ(first_bit_difference(all, ddp.final_state[0]), "");

  // Memory per rank: parameters and gradients whole, the optimizer's two
  // AdamW slots over the padded shard only.
  const auto psi = static_cast<int64_t>(result.plan.parameters);
  const int64_t shard = (psi + c.world - 1) / c.world;
  ASSERT_EQ(result.memory.size(), static_cast<size_t>(c.world));
  for (size_t r = 0; r < result.memory.size(); ++r) {
    EXPECT_EQ(result.memory[r].peak[TESSERA_MEM_PARAMS], 4 * psi) << "rank " << r;
    EXPECT_EQ(result.memory[r].peak[TESSERA_MEM_GRADS], 4 * psi) << "rank " << r;
    EXPECT_EQ(result.memory[r].peak[TESSERA_MEM_OPTIMIZER], 8 * shard) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, Zero1Equivalence,
                         ::testing::Values(Case{"mlp", 1}, Case{"mlp", 2}, Case{"mlp", 3},
                                           Case{"mlp", 4}, Case{"gpt", 1}, Case{"gpt", 2},
                                           Case{"gpt", 3}, Case{"gpt", 4}),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.model + "_world" +
                                  std::to_string(param_info.param.world);
                         });

// Padding is exercised: mlp's Ψ is a multiple of neither 2 nor 4, so the
// last shard on 2 and 4 ranks ends in padding (gpt's is a multiple of 12).
TEST(Zero1Equivalence, MlpShardsNeedPadding) {
  const int64_t psi = cached(spec_of("mlp", "none", 1)).plan.parameters;
  EXPECT_NE(psi % 2, 0) << psi << " parameters";
  EXPECT_NE(psi % 4, 0) << psi << " parameters";
}

// Per step and rank, as in the ZeRO paper: the reduce-scatter of the
// padded gradient grid ((N-1)/N of N·4·ceil(Ψ/N) bytes over the buckets),
// the allreduce of the f64 sum of squares (ring volume 2(N-1)/N · 8, in
// whole bytes) and the allgather of the padded shards ((N-1) · 4·ceil(Ψ/N)):
// 2Ψ-equivalent in total. Exact for every N: each bucket is N equal blocks.
TEST(Zero1Options, BytesSentAreTheReduceScatterAndTheShardAllgather) {
  for (const int world : {2, 3, 4}) {
    const train::RunResult& result = cached(spec_of("gpt", "zero1", world));
    const int64_t psi = result.plan.parameters;
    const int64_t shard = (psi + world - 1) / world;
    ASSERT_FALSE(result.logged.empty());
    EXPECT_EQ(result.logged.back().comm_bytes,
              2 * (world - 1) * 4 * shard + 2 * (world - 1) * 8 / world)
        << world << " ranks";
  }
}

// Overlap off, and buckets so small that the parameter allgather runs in
// many chunks of a few hundred elements, give the same bits as the
// defaults: the plan changes when operations start, not what they compute.
TEST(Zero1Options, OverlapAndBucketSizesKeepTheBits) {
  const train::RunResult& base = cached(spec_of("mlp", "zero1", 3));
  const train::RunResult& no_overlap = cached(spec_of("mlp", "zero1", 3, "overlap = false"));
  const train::RunResult& tiny =
      cached(spec_of("mlp", "zero1", 3, "bucket_mb = 0.001\nfirst_bucket_mb = 0.0005"));
  EXPECT_EQ(first_bit_difference(merged(no_overlap), merged(base)), "");
  EXPECT_EQ(first_bit_difference(merged(tiny), merged(base)), "");
  expect_params_identical(tiny);
}

// Communication memory is bounded by the bucket size, not the model: with
// buckets of B f32 elements over all ranks (floor(B/N) per rank), two
// staging slots of N send blocks and one receive block each are all zero1
// stages, the parameter allgather included, so the COMM peak is at most
// 2·(N+1)·floor(B/N)·4 bytes (about two buckets), far below the 4Ψ bytes of
// a staged gradient grid. With the default buckets (larger than these
// models) one bucket covers the whole shard: at most (N+1)·S·4 bytes. The
// bucket size changes when operations start, not the bits.
TEST(Zero1Memory, CommPeakIsAboutTwoBucketsNotTheModel) {
  const int64_t bucket = 524;  // f32 elements in 0.002 MiB
  const std::string small = "bucket_mb = 0.002\nfirst_bucket_mb = 0.002";
  for (const int world : {2, 3, 4}) {
    const train::RunResult& result = cached(spec_of("gpt", "zero1", world, small));
    const train::RunResult& base = cached(spec_of("gpt", "zero1", world));
    const int64_t psi = result.plan.parameters;
    const int64_t shard = (psi + world - 1) / world;
    const int64_t two_buckets = 2 * 4 * (world + 1) * (bucket / world);
    ASSERT_LT(two_buckets * 10, 4 * psi) << "the buckets must be small against the model";
    ASSERT_EQ(result.memory.size(), static_cast<size_t>(world));
    for (size_t r = 0; r < result.memory.size(); ++r) {
      const int64_t peak = result.memory[r].peak[TESSERA_MEM_COMM];
      EXPECT_GT(peak, 0) << world << " ranks, rank " << r;
      EXPECT_LE(peak, two_buckets) << world << " ranks, rank " << r;
      EXPECT_LE(base.memory[r].peak[TESSERA_MEM_COMM], 4 * (world + 1) * shard)
          << world << " ranks, rank " << r;
    }
    EXPECT_EQ(first_bit_difference(merged(result), merged(base)), "") << world << " ranks";
    EXPECT_EQ(result.logged.back().comm_bytes, base.logged.back().comm_bytes) << world << " ranks";
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

TEST(Zero1Options, NonPositiveBucketSizeIsRefused) {
  std::string msg = plan_error(spec_of("mlp", "zero1", 2, "bucket_mb = 0"));
  EXPECT_NE(msg.find("bucket_mb"), std::string::npos) << msg;
  msg = plan_error(spec_of("mlp", "zero1", 2, "first_bucket_mb = -1"));
  EXPECT_NE(msg.find("first_bucket_mb"), std::string::npos) << msg;
}

TEST(Zero1Options, ReduceDtypeIsNotAnOption) {
  const std::string msg = plan_error(spec_of("mlp", "zero1", 2, "reduce_dtype = \"bf16\""));
  EXPECT_NE(msg.find("reduce_dtype"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tessera::test

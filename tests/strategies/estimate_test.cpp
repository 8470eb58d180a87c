// The estimates of the data-parallel strategies (none, ddp, zero1, zero2,
// zero3, fsdp) against what a run measures: for the quickstart model, an
// 8-layer gpt and a llama, at 2 and 4 ranks, with the default options and
// those that change memory or traffic, the predicted peak per rank (total
// and by category) is within 10% of the largest rank's tracked peak
// (parameters, gradients and optimizer state exactly), and the predicted
// bytes per step are the logged comm_bytes exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "estimate_support.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/train/selection.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

// The data-parallel axis of the estimate of `s`: the world, and the data
// size the strategy reports; then the comparison with the run.
void expect_estimate_matches(const RunSpec& s) {
  const tessera_estimate e = estimate_of(s);
  EXPECT_EQ(e.data_size, s.world) << s.strategy;
  ASSERT_GE(e.num_axes, 1) << s.strategy;
  EXPECT_STREQ(e.axes[0].name, "data") << s.strategy;
  EXPECT_EQ(e.axes[0].group_size, s.world) << s.strategy;
  expect_estimate_matches_run(s);
}

// The strategies with their default options.
const std::vector<std::string> kStrategies = {"ddp", "zero1", "zero2", "zero3", "fsdp"};

// Options that change memory or traffic, per strategy.
struct Variant {
  std::string strategy;
  std::string options;
  int64_t micro_batches = 1;
};
const std::vector<Variant> kVariants = {
    {"ddp", "bucket_mb = 0.01\nfirst_bucket_mb = 0.005\nreduce_dtype = \"bf16\""},
    {"ddp", "overlap = false", 2},
    {"zero1", "bucket_mb = 0.02\nfirst_bucket_mb = 0.004"},
    {"zero1", "", 2},
    {"zero2", "reduce_dtype = \"bf16\"\noverlap = false"},
    {"zero2", "", 2},
    {"zero3", "reduce_dtype = \"bf16\""},
    {"zero3", "prefetch = false", 2},
    {"fsdp", "sharding_strategy = \"shard_grad_op\""},
    {"fsdp", "sharding_strategy = \"no_shard\"\nreduce_dtype = \"bf16\""},
    {"fsdp", "param_dtype = \"bf16\"\nreduce_dtype = \"bf16\"\nprefetch = false"},
    {"fsdp", "wrap = \"min_params\"\nmin_params = 60000", 2},
    {"ddp", "activation_checkpointing = 1"},
    {"zero3", "activation_checkpointing = 2", 2},
    {"fsdp", "activation_checkpointing = 1\nsharding_strategy = \"shard_grad_op\""},
};

TEST(EstimateTest, NoneMatchesItsRun) {
  expect_estimate_matches(estimate_spec(kQuickstartGpt, "none", 1));
  expect_estimate_matches(estimate_spec(kQuickstartGpt, "none", 1, "", 2));
}

TEST(EstimateTest, QuickstartDefaultsMatchTheirRuns) {
  for (const int world : {2, 4}) {
    for (const std::string& strategy : kStrategies) {
      expect_estimate_matches(estimate_spec(kQuickstartGpt, strategy, world));
    }
  }
}

TEST(EstimateTest, QuickstartOptionsMatchTheirRuns) {
  for (const int world : {2, 4}) {
    for (const Variant& v : kVariants) {
      expect_estimate_matches(
          estimate_spec(kQuickstartGpt, v.strategy, world, v.options, v.micro_batches));
    }
  }
}

TEST(EstimateTest, HybridShardMatchesItsRun) {
  expect_estimate_matches(estimate_spec(kQuickstartGpt, "fsdp", 4,
                                        "sharding_strategy = \"hybrid_shard\"\n"
                                        "shard_group_size = 2"));
  expect_estimate_matches(estimate_spec(kQuickstartGpt, "fsdp", 4,
                                        "sharding_strategy = \"hybrid_shard\"\n"
                                        "shard_group_size = 2\nreduce_dtype = \"bf16\""));
}

TEST(EstimateTest, Gpt8DefaultsMatchTheirRuns) {
  for (const int world : {2, 4}) {
    for (const std::string& strategy : kStrategies) {
      expect_estimate_matches(estimate_spec(kGpt8, strategy, world, "", 1, 16));
    }
  }
}

// Activation checkpointing (every unit, every second) on the deeper
// models, where it changes the activations most.
TEST(EstimateTest, CheckpointingMatchesItsRuns) {
  for (const char* model : {kGpt8, kLlama2}) {
    for (const std::string every : {"1", "2"}) {
      const std::string options = "activation_checkpointing = " + every;
      expect_estimate_matches(estimate_spec(model, "none", 1, options, 2, 16));
      expect_estimate_matches(estimate_spec(model, "zero2", 2, options, 1, 16));
      expect_estimate_matches(estimate_spec(model, "fsdp", 4, options, 1, 16));
    }
  }
}

TEST(EstimateTest, LlamaDefaultsMatchTheirRuns) {
  for (const int world : {2, 4}) {
    for (const std::string& strategy : kStrategies) {
      expect_estimate_matches(estimate_spec(kLlama2, strategy, world, "", 1, 16));
    }
  }
}

TEST(EstimateTest, RefusesWhatTheStrategyCannotRun) {
  EXPECT_NE(estimate_refusal(estimate_spec(kQuickstartGpt, "none", 2))
                .find("strategy 'none' trains on a single rank, but the world size is 2"),
            std::string::npos);
  EXPECT_NE(estimate_refusal(estimate_spec(kQuickstartGpt, "fsdp", 4,
                                           "sharding_strategy = \"hybrid_shard\"\n"
                                           "shard_group_size = 3"))
                .find("option 'shard_group_size' = 3 does not divide the world size 4"),
            std::string::npos);
  EXPECT_NE(estimate_refusal(estimate_spec(kQuickstartGpt, "zero2", 2, "reduce_dtype = \"f8\""))
                .find("option 'reduce_dtype' = 'f8' is not a valid dtype"),
            std::string::npos);
  EXPECT_NE(
      estimate_refusal(estimate_spec(kQuickstartGpt, "ddp", 2, "bucket_mb = -1")).find("bucket_mb"),
      std::string::npos);
}

}  // namespace
}  // namespace tessera::test

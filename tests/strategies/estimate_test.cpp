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

#include "strategy_support.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/train/selection.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

// The quickstart's model (examples/quickstart.toml), the same with 8
// layers, and examples/llama.toml's llama with 2 layers.
const char* const kQuickstart =
    "name = \"gpt\"\nlayers = 2\nd_model = 64\nheads = 4\nseq_len = 32\nvocab = 256\n";
const char* const kGpt8 =
    "name = \"gpt\"\nlayers = 8\nd_model = 64\nheads = 4\nseq_len = 32\nvocab = 256\n";
const char* const kLlama =
    "name = \"llama\"\nvocab = 256\nseq_len = 64\nlayers = 2\nd_model = 64\nheads = 4\n"
    "kv_heads = 2\n";

// One step of `strategy` on `world` ranks (batch 32, adamw): every peak is
// reached in the first step (the activation contexts are made then and
// kept), so one step measures what many would.
RunSpec estimate_spec(const char* model, const std::string& strategy, int world,
                      const std::string& options = "", int64_t micro_batches = 1,
                      int64_t batch = 32) {
  RunSpec s;
  s.model_table = model;
  s.strategy = strategy;
  s.world = world;
  s.steps = 1;
  s.batch = batch;
  s.micro_batches = micro_batches;
  s.strategy_options = options;
  return s;
}

tessera_estimate estimate_of(const RunSpec& s) {
  return train::estimate_config(parse_config(config_toml(s), "estimate.toml"), registry(), s.world);
}

// |predicted - measured| <= 10% of measured (both zero counts as equal).
bool within_10_percent(int64_t predicted, int64_t measured) {
  const int64_t diff = predicted > measured ? predicted - measured : measured - predicted;
  return diff * 10 <= measured;
}

const char* const kCategoryNames[TESSERA_MEM_CATEGORY_COUNT] = {
    "params", "grads", "optimizer", "comm", "activations", "other"};

// Expects the estimate of `s` to match its run (see the top of the file)
// and prints both, one line per category and the bytes.
void expect_estimate_matches(const RunSpec& s, const std::string& label) {
  const train::RunResult& run = cached(s);
  const tessera_estimate e = estimate_of(s);
  std::array<int64_t, TESSERA_MEM_CATEGORY_COUNT> peak{};
  int64_t total = 0;
  for (const MemoryStats& m : run.memory) {
    for (size_t c = 0; c < peak.size(); ++c) peak[c] = std::max(peak[c], m.peak[c]);
    total = std::max(total, m.total_peak);
  }
  const std::string where = label + " (" + s.strategy + " on " + std::to_string(s.world) +
                            " ranks, options '" + s.strategy_options + "', " +
                            std::to_string(s.micro_batches) + " micro-batches)";
  EXPECT_EQ(e.data_size, s.world) << where;
  for (const tessera_mem_category c :
       {TESSERA_MEM_PARAMS, TESSERA_MEM_GRADS, TESSERA_MEM_OPTIMIZER}) {
    EXPECT_EQ(e.memory[c], peak[static_cast<size_t>(c)]) << where << ": " << kCategoryNames[c];
  }
  for (const tessera_mem_category c :
       {TESSERA_MEM_COMM, TESSERA_MEM_ACTIVATIONS, TESSERA_MEM_OTHER}) {
    EXPECT_TRUE(within_10_percent(e.memory[c], peak[static_cast<size_t>(c)]))
        << where << ": " << kCategoryNames[c] << " predicted " << e.memory[c] << ", measured "
        << peak[static_cast<size_t>(c)];
  }
  EXPECT_TRUE(within_10_percent(e.memory_total, total))
      << where << ": total predicted " << e.memory_total << ", measured " << total;
  ASSERT_GE(e.num_axes, 1) << where;
  EXPECT_STREQ(e.axes[0].name, "data") << where;
  EXPECT_EQ(e.axes[0].group_size, s.world) << where;
  ASSERT_FALSE(run.logged.empty()) << where;
  EXPECT_EQ(e.axes[0].bytes, run.logged.back().comm_bytes) << where << ": bytes per step";
  std::printf(
      "%-10s %-6s %d %-40s m%lld | comm %lld/%lld act %lld/%lld total %lld/%lld bytes "
      "%lld/%lld\n",
      label.c_str(), s.strategy.c_str(), s.world, s.strategy_options.c_str(),
      static_cast<long long>(s.micro_batches), static_cast<long long>(e.memory[TESSERA_MEM_COMM]),
      static_cast<long long>(peak[TESSERA_MEM_COMM]),
      static_cast<long long>(e.memory[TESSERA_MEM_ACTIVATIONS]),
      static_cast<long long>(peak[TESSERA_MEM_ACTIVATIONS]), static_cast<long long>(e.memory_total),
      static_cast<long long>(total), static_cast<long long>(e.axes[0].bytes),
      static_cast<long long>(run.logged.back().comm_bytes));
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
};

TEST(EstimateTest, NoneMatchesItsRun) {
  expect_estimate_matches(estimate_spec(kQuickstart, "none", 1), "quickstart");
  expect_estimate_matches(estimate_spec(kQuickstart, "none", 1, "", 2), "quickstart");
}

TEST(EstimateTest, QuickstartDefaultsMatchTheirRuns) {
  for (const int world : {2, 4}) {
    for (const std::string& strategy : kStrategies) {
      expect_estimate_matches(estimate_spec(kQuickstart, strategy, world), "quickstart");
    }
  }
}

TEST(EstimateTest, QuickstartOptionsMatchTheirRuns) {
  for (const int world : {2, 4}) {
    for (const Variant& v : kVariants) {
      expect_estimate_matches(
          estimate_spec(kQuickstart, v.strategy, world, v.options, v.micro_batches), "quickstart");
    }
  }
}

TEST(EstimateTest, HybridShardMatchesItsRun) {
  expect_estimate_matches(estimate_spec(kQuickstart, "fsdp", 4,
                                        "sharding_strategy = \"hybrid_shard\"\n"
                                        "shard_group_size = 2"),
                          "quickstart");
  expect_estimate_matches(estimate_spec(kQuickstart, "fsdp", 4,
                                        "sharding_strategy = \"hybrid_shard\"\n"
                                        "shard_group_size = 2\nreduce_dtype = \"bf16\""),
                          "quickstart");
}

TEST(EstimateTest, Gpt8DefaultsMatchTheirRuns) {
  for (const int world : {2, 4}) {
    for (const std::string& strategy : kStrategies) {
      expect_estimate_matches(estimate_spec(kGpt8, strategy, world, "", 1, 16), "gpt8");
    }
  }
}

TEST(EstimateTest, LlamaDefaultsMatchTheirRuns) {
  for (const int world : {2, 4}) {
    for (const std::string& strategy : kStrategies) {
      expect_estimate_matches(estimate_spec(kLlama, strategy, world, "", 1, 16), "llama");
    }
  }
}

// The message of the estimate's refusal; expects INVALID_ARGUMENT.
std::string estimate_refusal(const RunSpec& s) {
  try {
    (void)estimate_of(s);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << e.what();
    return e.what();
  }
  return "";
}

TEST(EstimateTest, RefusesWhatTheStrategyCannotRun) {
  EXPECT_NE(estimate_refusal(estimate_spec(kQuickstart, "none", 2))
                .find("strategy 'none' trains on a single rank, but the world size is 2"),
            std::string::npos);
  EXPECT_NE(estimate_refusal(estimate_spec(kQuickstart, "fsdp", 4,
                                           "sharding_strategy = \"hybrid_shard\"\n"
                                           "shard_group_size = 3"))
                .find("option 'shard_group_size' = 3 does not divide the world size 4"),
            std::string::npos);
  EXPECT_NE(estimate_refusal(estimate_spec(kQuickstart, "zero2", 2, "reduce_dtype = \"f8\""))
                .find("option 'reduce_dtype' = 'f8' is not a valid dtype"),
            std::string::npos);
  EXPECT_NE(
      estimate_refusal(estimate_spec(kQuickstart, "ddp", 2, "bucket_mb = -1")).find("bucket_mb"),
      std::string::npos);
}

}  // namespace
}  // namespace tessera::test

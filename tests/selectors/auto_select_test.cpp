// The `auto` selector on made-up estimates: ranking, budget and headroom,
// ties resolved by the guide, the rows' reasons, candidates from the
// strategies' declared options, trials, and its errors.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "select_support.hpp"

namespace tessera::test {
namespace {

constexpr int64_t kMiB = 1024 * 1024;

struct Fake {
  double mib = 0;
  double flops = 0;
  int64_t bytes = 0;
  double bubble = 0;
};

// Estimates from a table keyed "strategy|options"; anything else is
// refused naming the candidate.
EstimateFn table_estimates(std::map<std::string, Fake> table, int32_t group) {
  return
      [table = std::move(table), group](const std::string& s, const std::string& o,
                                        tessera_estimate* out, std::string* why) -> tessera_status {
        const auto it = table.find(s + "|" + o);
        if (it == table.end()) {
          *why = s + ": not in the test's table (" + o + ")";
          return TESSERA_ERR_INVALID_ARGUMENT;
        }
        *out = make_estimate(static_cast<int64_t>(it->second.mib * static_cast<double>(kMiB)),
                             it->second.flops, it->second.bytes, group, it->second.bubble);
        return TESSERA_OK;
      };
}

const train::ModelDescription& small_model() {
  static const train::ModelDescription m =
      transformer("small", 2, 64, 4, 128, 16, train::BatchSpec{8, 1, 2});
  return m;
}

const train::ModelDescription& ten_billion() {
  static const train::ModelDescription m =
      transformer("gpt-10b", 48, 4096, 32, 50257, 512, train::BatchSpec{64, 8, 2});
  return m;
}

SelectSetup setup_of(std::vector<std::string> strategies, std::map<std::string, Fake> table,
                     int32_t world = 2) {
  SelectSetup s;
  s.world = world;
  s.ranks_per_node = world;
  s.budget = 20 * kMiB;
  s.model = &small_model();
  s.strategies = std::move(strategies);
  s.estimate = table_estimates(std::move(table), world);
  s.props = cpu_props();
  return s;
}

// gemm_flops 1e9 and 1 GB/s: 1e9 FLOPs = 1 s, 1e8 bytes = 0.1 s.
const std::string kRates = "gemm_flops = 1e9\n";

int chosen_count(const SelectResult& r) {
  int n = 0;
  for (const Row& row : r.rows) n += row.chosen() ? 1 : 0;
  return n;
}

TEST(AutoSelect, FastestFittingIsChosenAndRowsExplainThemselves) {
  const auto s = setup_of({"ddp", "zero1", "zero3"}, {{"ddp|", {28.3, 1e9, 100'000'000}},
                                                      {"zero1|", {15, 1e9, 100'000'000}},
                                                      {"zero3|", {10, 1e9, 600'000'000}}});
  const SelectResult r = run_select(s, kRates);
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  ASSERT_EQ(r.rows.size(), 3U);
  EXPECT_EQ(chosen_count(r), 1);
  EXPECT_EQ(r.rows[0].name(), "zero1");
  EXPECT_TRUE(r.rows[0].chosen());
  EXPECT_NEAR(r.rows[0].step_seconds, 1.1 + 1e-5, 1e-9);
  EXPECT_NEAR(r.rows[0].compute_seconds, 1.0, 1e-12);
  EXPECT_NEAR(r.rows[0].comm_seconds, 0.1 + 1e-5, 1e-12);
  EXPECT_NE(r.rows[0].reason.find("fastest predicted: 1.1 s per step"), std::string::npos)
      << r.rows[0].reason;
  EXPECT_EQ(r.rows[1].name(), "zero3");
  EXPECT_TRUE(r.rows[1].fits());
  EXPECT_NE(r.rows[1].reason.find("predicted 1.6 s per step, 45% slower than the choice"),
            std::string::npos)
      << r.rows[1].reason;
  EXPECT_EQ(r.rows[2].name(), "ddp");
  EXPECT_FALSE(r.rows[2].fits());
  EXPECT_EQ(r.rows[2].reason, "28.3 MiB per rank > budget 18.0 MiB (20.0 MiB less 10% headroom)");
  EXPECT_EQ(r.rows[2].estimate.memory_total, static_cast<int64_t>(28.3 * kMiB));
}

TEST(AutoSelect, HeadroomDecidesWhatFits) {
  const auto s = setup_of({"ddp", "zero3"},
                          {{"ddp|", {19, 1e9, 100'000'000}}, {"zero3|", {10, 1e9, 600'000'000}}});
  SelectResult r = run_select(s, kRates);
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_EQ(r.chosen().strategy, "zero3");
  EXPECT_EQ(r.find("ddp", "").reason,
            "19.0 MiB per rank > budget 18.0 MiB (20.0 MiB less 10% headroom)");
  r = run_select(s, kRates + "headroom = 0.0\n");
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_EQ(r.chosen().strategy, "ddp");
}

TEST(AutoSelect, TieWithinNoiseGoesToTheGuide) {
  // Under 1B parameters the guide says DDP: ddp is 5% slower than zero1,
  // inside a noise of 10%.
  const auto s = setup_of({"ddp", "zero1"},
                          {{"ddp|", {10, 1e9, 150'000'000}}, {"zero1|", {8, 1e9, 100'000'000}}});
  SelectResult r = run_select(s, kRates + "noise = 0.1\n");
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  ASSERT_EQ(r.rows[0].strategy, "ddp");
  EXPECT_TRUE(r.rows[0].chosen());
  EXPECT_NE(r.rows[0].reason.find("within 10% of the fastest (zero1, 1.1 s)"), std::string::npos)
      << r.rows[0].reason;
  EXPECT_NE(r.rows[0].reason.find("the guide's choice (under 1B parameters on 1-4 GPUs: DDP)"),
            std::string::npos)
      << r.rows[0].reason;
  EXPECT_NE(r.rows[1].reason.find("within noise, the choice is preferred (DDP)"), std::string::npos)
      << r.rows[1].reason;
  // With a noise of 1% the prediction decides.
  r = run_select(s, kRates + "noise = 0.01\n");
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_EQ(r.chosen().strategy, "zero1");
}

TEST(AutoSelect, GuideRowOfTheModelSizeBreaksTies) {
  // 10B parameters on 8 ranks: the guide says FSDP FullShard.
  auto s = setup_of({"ddp", "zero2", "fsdp"},
                    {{"ddp|", {200'000, 1e9, 0}},
                     {"zero2|", {60'000, 1e9, 0}},
                     {"fsdp|sharding_strategy = \"shard_grad_op\"", {60'000, 1e9, 20'000'000}},
                     {"fsdp|sharding_strategy = \"full_shard\"", {30'000, 1e9, 80'000'000}}},
                    8);
  s.model = &ten_billion();
  s.budget = 80'000'000'000;
  SelectResult r = run_select(s, kRates + "noise = 0.1\n");
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_EQ(r.chosen().name(), "fsdp (sharding_strategy = \"full_shard\")");
  EXPECT_NE(r.chosen().reason.find("the guide's choice (7B-13B parameters on 4-8 GPUs: FSDP "
                                   "FullShard (or FSDP + ZeRO-3))"),
            std::string::npos)
      << r.chosen().reason;
  // Full sharding 30% slower: outside the noise, the prediction wins and
  // the chosen row states the deviation.
  s.estimate =
      table_estimates({{"ddp|", {200'000, 1e9, 0}},
                       {"zero2|", {60'000, 1e9, 0}},
                       {"fsdp|sharding_strategy = \"shard_grad_op\"", {60'000, 1e9, 20'000'000}},
                       {"fsdp|sharding_strategy = \"full_shard\"", {30'000, 1e9, 300'000'000}}},
                      8);
  r = run_select(s, kRates);
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_EQ(r.chosen().name(), "zero2");
  EXPECT_NE(r.chosen().reason.find("the guide recommends 7B-13B parameters on 4-8 GPUs: FSDP "
                                   "FullShard (or FSDP + ZeRO-3); its best candidate fsdp "
                                   "(sharding_strategy = \"full_shard\") is predicted 30% slower"),
            std::string::npos)
      << r.chosen().reason;
}

TEST(AutoSelect, NothingFitsListsEveryCandidatesNeed) {
  const auto s =
      setup_of({"ddp", "zero1", "tensor"}, {{"ddp|", {28.3, 1e9, 0}}, {"zero1|", {25, 1e9, 0}}});
  const SelectResult r = run_select(s, kRates);
  EXPECT_EQ(r.status, TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(r.rows.empty());
  EXPECT_NE(r.error.find("auto: no candidate fits 18.0 MiB per rank (budget 20.0 MiB from test "
                         "minus headroom 10%): ddp needs 28.3 MiB, zero1 needs 25.0 MiB, tensor "
                         "(size = 2, mode = \"tensor\") refused: tensor: not in the test's table "
                         "(size = 2, mode = \"tensor\")"),
            std::string::npos)
      << r.error;
}

TEST(AutoSelect, RefusedCandidateRowCarriesTheStrategysMessage) {
  const auto s = setup_of({"ddp", "pipeline"}, {{"ddp|", {10, 1e9, 0}}});
  const SelectResult r = run_select(s, kRates);
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  ASSERT_TRUE(r.has("pipeline", "stages = 2, schedule = \"gpipe\""));
  const Row& p = r.find("pipeline", "stages = 2, schedule = \"gpipe\"");
  EXPECT_EQ(p.flags & (TESSERA_ROW_ESTIMATED | TESSERA_ROW_FITS | TESSERA_ROW_CHOSEN), 0U);
  EXPECT_EQ(p.reason, "pipeline: not in the test's table (stages = 2, schedule = \"gpipe\")");
  EXPECT_EQ(r.rows.back().strategy, "pipeline");
}

TEST(AutoSelect, CandidatesComeFromTheDeclaredOptions) {
  SelectSetup s = setup_of({}, {{"ddp|", {10, 1e9, 0}}}, 4);
  SelectResult r = run_select(s, kRates);
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  const auto has = [&](const std::string& c) {
    return std::find(r.estimated.begin(), r.estimated.end(), c) != r.estimated.end();
  };
  EXPECT_FALSE(has("none|"));
  EXPECT_TRUE(has("ddp|"));
  EXPECT_TRUE(has("zero1|"));
  EXPECT_TRUE(has("zero2|"));
  EXPECT_TRUE(has("zero3|"));
  EXPECT_TRUE(has("fsdp|sharding_strategy = \"full_shard\""));
  EXPECT_TRUE(has("fsdp|sharding_strategy = \"shard_grad_op\""));
  EXPECT_FALSE(has("fsdp|sharding_strategy = \"hybrid_shard\""));
  // 4 units (embed, 2 blocks, head): 2 and 4 stages.
  for (const char* sched : {"gpipe", "1f1b"}) {
    EXPECT_TRUE(has(std::string("pipeline|stages = 2, schedule = \"") + sched + "\""));
    EXPECT_TRUE(has(std::string("pipeline|stages = 4, schedule = \"") + sched + "\""));
  }
  // Interleaving needs micro-batches a multiple of the stages (1 here).
  EXPECT_FALSE(has("pipeline|stages = 2, schedule = \"interleaved\""));
  EXPECT_TRUE(has("tensor|size = 2, mode = \"tensor\""));
  EXPECT_TRUE(has("tensor|size = 4, mode = \"sequence\""));
  // One micro-batch: hybrid's default 1f1b would be refused, gpipe runs.
  EXPECT_TRUE(has("hybrid|dp = 1, pp = 2, tp = 2, schedule = \"gpipe\""));
  EXPECT_FALSE(has("hybrid|dp = 1, pp = 2, tp = 2, schedule = \"gpipe\", dp_shard = \"zero1\""));
  // async_sgd has an estimate but is never proposed: it is not exact.
  EXPECT_FALSE(has("async_sgd|"));
  EXPECT_EQ(r.rows.size(), r.estimated.size());

  // One rank: `none` and no model-parallel candidate.
  s = setup_of({}, {{"none|", {10, 1e9, 0}}}, 1);
  r = run_select(s, kRates);
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_EQ(r.chosen().strategy, "none");
  EXPECT_TRUE(has("none|"));
  EXPECT_FALSE(has("pipeline|stages = 2, schedule = \"gpipe\""));

  // 64 ranks, 8 to a node: bounded, tensor groups inside a node, hybrid
  // with zero1 where the data axis has several ranks.
  s = setup_of({}, {{"ddp|", {10, 1e9, 0}}}, 64);
  s.ranks_per_node = 8;
  s.model = &ten_billion();
  r = run_select(s, kRates);
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_LE(r.estimated.size(), 64U);
  EXPECT_TRUE(has("tensor|size = 8, mode = \"tensor\""));
  EXPECT_FALSE(has("tensor|size = 16, mode = \"tensor\""));
  EXPECT_TRUE(has("hybrid|dp = 4, pp = 8, tp = 2, dp_shard = \"zero1\""));
  EXPECT_TRUE(has("pipeline|stages = 8, schedule = \"interleaved\""));
}

TEST(AutoSelect, StrategiesOptionRestrictsAndChecksNames) {
  auto s = setup_of({}, {{"ddp|", {10, 1e9, 0}}, {"zero1|", {8, 1e9, 0}}});
  SelectResult r = run_select(s, kRates + "strategies = \"zero1, ddp\"\n");
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_EQ(r.rows.size(), 2U);
  r = run_select(s, kRates + "strategies = \"ddp,bogus\"\n");
  EXPECT_EQ(r.status, TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(r.error.find("auto: option 'strategies' names 'bogus', which is not installed; "
                         "installed: "),
            std::string::npos)
      << r.error;
  // A strategy without `estimate` is left out unless named.
  s.without_estimate = {"zero1"};
  r = run_select(s, kRates);
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_FALSE(r.has("zero1", ""));
}

// Named strategies that propose no candidate: the error says why each
// does not.
TEST(AutoSelect, NoCandidateSaysWhyEachNamedStrategyHasNone) {
  const auto s = setup_of({"ddp", "none", "async_sgd"}, {{"ddp|", {10, 1e9, 0}}});
  const SelectResult r = run_select(s, kRates + "strategies = \"async_sgd, none\"\n");
  EXPECT_EQ(r.status, TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(r.error.find("auto: no candidate strategy for 2 ranks: async_sgd is never a candidate "
                         "(asynchronous updates are not exact"),
            std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("; none trains on a single rank; installed strategies: "),
            std::string::npos)
      << r.error;
}

TEST(AutoSelect, TrialModeChoosesTheMeasuredFastestThatFits) {
  auto s = setup_of({"ddp", "zero1", "zero3"}, {{"ddp|", {12, 1e9, 300'000'000}},
                                                {"zero1|", {10, 1e9, 100'000'000}},
                                                {"zero3|", {8, 1e9, 600'000'000}}});
  std::vector<std::string> tried;
  s.trial = [&](const std::string& st, const std::string&, int64_t steps, double* sec,
                int64_t* peak, std::string*) -> tessera_status {
    EXPECT_EQ(steps, 3);
    tried.push_back(st);
    *sec = st == "zero1" ? 0.9 : 0.5;
    *peak = 9 * kMiB;
    return TESSERA_OK;
  };
  SelectResult r = run_select(s, kRates + "trial_steps = 3\ntrials = 2\n");
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_EQ(tried, (std::vector<std::string>{"zero1", "ddp"}));
  EXPECT_EQ(chosen_count(r), 1);
  EXPECT_EQ(r.rows[0].strategy, "ddp");
  EXPECT_TRUE(r.rows[0].chosen());
  EXPECT_NE(r.rows[0].flags & TESSERA_ROW_MEASURED, 0U);
  EXPECT_DOUBLE_EQ(r.rows[0].measured_seconds, 0.5);
  EXPECT_NE(r.rows[0].reason.find("measured fastest in trial: 0.5 s per step, peak 9.0 MiB"),
            std::string::npos)
      << r.rows[0].reason;
  EXPECT_EQ(r.rows[1].strategy, "zero1");
  EXPECT_NE(r.rows[1].reason.find("measured 0.9 s per step in trial, 80% slower than the choice"),
            std::string::npos)
      << r.rows[1].reason;
  EXPECT_EQ(r.rows[2].strategy, "zero3");
  EXPECT_EQ(r.rows[2].flags & TESSERA_ROW_MEASURED, 0U);

  // A trial whose peak exceeds the budget is not chosen.
  s.trial = [&](const std::string& st, const std::string&, int64_t, double* sec, int64_t* peak,
                std::string*) {
    *sec = st == "zero1" ? 0.9 : 0.5;
    *peak = st == "zero1" ? 9 * kMiB : 21 * kMiB;
    return TESSERA_OK;
  };
  r = run_select(s, kRates + "trial_steps = 3\ntrials = 2\n");
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_EQ(r.chosen().strategy, "zero1");
  EXPECT_NE(r.find("ddp", "").reason.find("peak 21.0 MiB > budget 20.0 MiB"), std::string::npos)
      << r.find("ddp", "").reason;
}

TEST(AutoSelect, TrialModeFallsBackToThePredictionWhereTrialsCannotRun) {
  const auto s = setup_of({"ddp", "zero1"},
                          {{"ddp|", {12, 1e9, 300'000'000}}, {"zero1|", {10, 1e9, 100'000'000}}});
  const SelectResult r = run_select(s, kRates + "trial_steps = 3\n");
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_EQ(r.chosen().strategy, "zero1");
  EXPECT_NE(r.chosen().reason.find("trials unavailable (ranks are processes); chosen by "
                                   "prediction"),
            std::string::npos)
      << r.chosen().reason;
}

TEST(AutoSelect, GroupsSpanningNodesUseTheSlowerLinks) {
  auto s = setup_of({"ddp"}, {{"ddp|", {10, 1e9, 800'000'000}}}, 16);
  s.ranks_per_node = 8;
  SelectResult r = run_select(s, kRates);
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_NEAR(r.rows[0].comm_seconds, 0.8 * 8 + 1e-5, 1e-9);
  s.ranks_per_node = 16;
  r = run_select(s, kRates);
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_NEAR(r.rows[0].comm_seconds, 0.8 + 1e-5, 1e-9);
}

TEST(AutoSelect, ComputeRateOfDevicesAndOfThisMachine) {
  auto s = setup_of({"ddp"}, {{"ddp|", {10, 1e14, 0}}});
  s.props.device = TESSERA_DEVICE_CUDA;
  SelectResult r = run_select(s);
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  EXPECT_NEAR(r.rows[0].compute_seconds, 1.0, 1e-12);
  // The measured single-thread sgemm rate: positive and plausible.
  s.props = cpu_props();
  r = run_select(s);
  ASSERT_EQ(r.status, TESSERA_OK) << r.error;
  const double rate = 1e14 / r.rows[0].compute_seconds;
  EXPECT_GT(rate, 1e8);
  EXPECT_LT(rate, 1e13);
}

TEST(AutoSelect, BadOptionsAreRefusedByName) {
  const auto s = setup_of({"ddp"}, {{"ddp|", {10, 1e9, 0}}});
  SelectResult r = run_select(s, "headroom = 1.5\n");
  EXPECT_EQ(r.status, TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(r.error.find("auto: option 'headroom' = 1.5 must be in [0, 1)"), std::string::npos)
      << r.error;
  r = run_select(s, "trials = 0\n");
  EXPECT_NE(r.error.find("auto: option 'trials' = 0 must be at least 1"), std::string::npos)
      << r.error;
}

}  // namespace
}  // namespace tessera::test

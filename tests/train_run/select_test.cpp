// Strategy "auto" in the run loop, with the `pick` test selector (which
// chooses the strategy its options name): the choice trains exactly as that
// strategy named directly, the log names it, checkpoints record it, process
// ranks get rank 0's choice, and bad selector names, options and refusals
// are errors naming them. Also run.memory_per_rank and memory sizes.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <variant>

#include "run_fixture.hpp"
#include "tessera/core/byte_size.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/train/checkpointing.hpp"
#include "tessera/core/train/selection.hpp"

namespace tessera::test {
namespace {

using train::run_training;
using train::RunOptions;
using train::RunResult;

// mlp_toml under strategy "auto" with the pick selector choosing `choose`.
std::string auto_mlp(int world, int steps, const std::string& choose,
                     const std::string& extra_options = "") {
  return mlp_toml("auto", world, steps) + "[strategy.options]\nselector = \"pick\"\nchoose = \"" +
         choose + "\"\n" + extra_options;
}

RunResult quiet_run(const Config& config, std::string* log = nullptr) {
  std::ostringstream out;
  RunOptions options;
  options.out = &out;
  options.collect_final_state = true;
  RunResult r = run_training(config, with_fixtures(), options);
  if (log != nullptr) *log = out.str();
  return r;
}

TEST(AutoStrategy, TheChoiceTrainsLikeTheStrategyNamedDirectly) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  std::string log;
  const RunResult chosen = quiet_run(make_config(auto_mlp(2, 4, "ddp")), &log);
  const RunResult direct = quiet_run(make_config(mlp_toml("ddp", 2, 4)));
  EXPECT_EQ(chosen.plan.strategy, "ddp");
  ASSERT_EQ(chosen.final_state.size(), direct.final_state.size());
  for (std::size_t r = 0; r < chosen.final_state.size(); ++r) {
    expect_same_state(chosen.final_state[r], direct.final_state[r]);
  }
  EXPECT_EQ(chosen.final_loss, direct.final_loss);
  EXPECT_NE(log.find("strategy: ddp on 2 ranks as threads"), std::string::npos) << log;
  EXPECT_NE(log.find("strategy auto: selector 'pick' chose ddp on 2 ranks"), std::string::npos)
      << log;
  EXPECT_NE(log.find("  chosen: ddp: named by the test"), std::string::npos) << log;
  EXPECT_NE(log.find("  none: not named"), std::string::npos) << log;
}

// A candidate whose data-parallel slices the batch cannot feed is refused
// while choosing, with the reason the run would give, and the choice falls
// on one that runs.
TEST(AutoStrategy, CandidatesTheBatchCannotFeedAreRefused) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  TESSERA_REQUIRE_STRATEGY("pipeline");
  if (with_fixtures().find(TESSERA_KIND_SELECTOR, "auto") == nullptr) {
    GTEST_SKIP() << "selector plugin 'auto' is not built (plugins/selectors/auto)";
  }
  std::string toml = mlp_toml("auto", 2, 1) + "[strategy.options]\nstrategies = \"ddp,pipeline\"\n";
  const std::string batch = "batch_size = 16";
  toml.replace(toml.find(batch), batch.size(), "batch_size = 1");
  std::string log;
  const RunResult r = quiet_run(make_config(toml), &log);
  EXPECT_EQ(r.plan.strategy, "pipeline");
  EXPECT_NE(log.find("  ddp: data.batch_size = 1 is too small: strategy 'ddp' on 2 ranks trains 2 "
                     "data-parallel slices x data.micro_batches = 1"),
            std::string::npos)
      << log;
}

TEST(AutoStrategy, TheChoiceKeepsItsOptions) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  const RunResult r =
      quiet_run(make_config(auto_mlp(2, 2, "ddp", "choose_options = \"bucket_mb = 0.001\"\n")));
  EXPECT_EQ(r.plan.strategy, "ddp");
  ASSERT_TRUE(r.plan.strategy_options.values.contains("bucket_mb"));
  EXPECT_EQ(std::get<double>(r.plan.strategy_options.values.at("bucket_mb")), 0.001);
  const std::string message = error_of([] {
    (void)quiet_run(make_config(auto_mlp(2, 2, "ddp", "choose_options = \"buckets = 3\"\n")));
  });
  EXPECT_NE(message.find("selector 'pick' choice ddp {buckets = 3}"), std::string::npos) << message;
  EXPECT_NE(message.find("buckets"), std::string::npos) << message;
}

TEST(AutoStrategy, CheckpointsRecordTheResolvedStrategy) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  ScratchDir dir;
  (void)quiet_run(make_config(auto_mlp(2, 2, "ddp"), {"checkpoint.dir=" + dir.path().string()}));
  const auto latest = train::find_latest_checkpoint(dir.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->metadata.at("strategy"), "ddp");
  EXPECT_EQ(latest->metadata.at("selected_by"), "pick");
  EXPECT_EQ(latest->metadata.at("strategy_options"), "");
}

TEST(AutoStrategy, ProcessRanksTakeRankZerosChoice) {
  TESSERA_REQUIRE_STRATEGY("none");
  std::string log;
  const RunResult r = quiet_run(
      make_config(auto_mlp(1, 2, "none", "probe = true\n") + "[backend]\nname = \"train_solo\"\n"),
      &log);
  EXPECT_FALSE(r.plan.thread_ranks);
  EXPECT_EQ(r.plan.strategy, "none");
  EXPECT_NE(log.find("strategy auto: selector 'pick' chose none on 1 ranks"), std::string::npos)
      << log;
  EXPECT_NE(log.find("one rank: no communication"), std::string::npos) << log;
  ASSERT_EQ(r.logged.size(), 2U);
}

TEST(AutoStrategy, ProbeAndTrialReachTheSelector) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  std::string log;
  (void)quiet_run(make_config(auto_mlp(2, 2, "ddp", "probe = true\ntrial_steps = 3\n")), &log);
  EXPECT_NE(log.find("probed: allreduce over 2 ranks"), std::string::npos) << log;
  EXPECT_NE(log.find("; trial peak "), std::string::npos) << log;
  std::string solo_log;
  (void)quiet_run(make_config(auto_mlp(1, 1, "none", "trial_steps = 2\n") +
                              "[backend]\nname = \"train_solo\"\n"),
                  &solo_log);
  EXPECT_NE(solo_log.find("no trial: trials need ranks that are threads of one process; backend "
                          "'train_solo' runs process ranks"),
            std::string::npos)
      << solo_log;
}

TEST(AutoStrategy, AnUnknownSelectorListsTheInstalledOnes) {
  const std::string message = error_of([] {
    (void)quiet_run(
        make_config(mlp_toml("auto", 2, 1) + "[strategy.options]\nselector = \"oracle\"\n"));
  });
  EXPECT_NE(message.find("oracle"), std::string::npos) << message;
  EXPECT_NE(message.find("pick"), std::string::npos) << message;
}

// The selector's options are [strategy.options] itself, so a problem names
// its line or its override, and no source location.
TEST(AutoStrategy, SelectorOptionsAreChecked) {
  const std::string message =
      error_of([] { (void)quiet_run(make_config(auto_mlp(2, 1, "ddp", "colour = \"red\"\n"))); });
  EXPECT_NE(message.find("colour"), std::string::npos) << message;
  const std::string overridden = error_of(
      [] { (void)quiet_run(make_config(auto_mlp(2, 1, "ddp"), {"strategy.options.colour=1"})); });
  EXPECT_NE(overridden.find("unknown option 'colour' (--set strategy.options.colour=1)"),
            std::string::npos)
      << overridden;
  const std::string not_string = error_of([] {
    (void)quiet_run(make_config(mlp_toml("auto", 2, 1) + "[strategy.options]\nselector = 3\n"));
  });
  EXPECT_NE(not_string.find("'selector' (line "), std::string::npos) << not_string;
  EXPECT_NE(not_string.find(") must be a string naming a selector plugin, got an integer"),
            std::string::npos)
      << not_string;
  EXPECT_EQ(not_string.find(".cpp:"), std::string::npos) << not_string;
}

TEST(AutoStrategy, ARefusalNamesTheSelector) {
  const Error e = thrown_error([] {
    (void)quiet_run(make_config(auto_mlp(2, 1, "ddp", "fail = \"nothing fits 1.0 MiB\"\n")));
  });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.what()).find("selector 'pick' ("), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("nothing fits 1.0 MiB"), std::string::npos) << e.what();
}

TEST(AutoStrategy, AChoiceOfAStrategyNotInstalledIsAnError) {
  const std::string message =
      error_of([] { (void)quiet_run(make_config(auto_mlp(2, 1, "telepathy"))); });
  EXPECT_NE(message.find("chose strategy 'telepathy', which is not installed"), std::string::npos)
      << message;
}

TEST(MemoryBudget, RunMemoryPerRankIsTheBudget) {
  const Config config = make_config(mlp_toml("none", 1, 1), {"run.memory_per_rank=\"1.5GiB\""});
  EXPECT_EQ(config.run.memory_per_rank, int64_t{3} << 29);
  const train::MemoryBudget b = train::memory_budget(config, 4);
  EXPECT_EQ(b.bytes, int64_t{3} << 29);
  EXPECT_EQ(b.source, "run.memory_per_rank");
  const train::MemoryBudget detected = train::memory_budget(make_config(mlp_toml("none", 1, 1)), 2);
  EXPECT_GT(detected.bytes, 0);
  EXPECT_NE(detected.source.find("/ 2 local ranks"), std::string::npos) << detected.source;
  const std::string message = error_of(
      [] { (void)make_config(mlp_toml("none", 1, 1), {"run.memory_per_rank=\"2 gigs\""}); });
  EXPECT_NE(message.find("run.memory_per_rank"), std::string::npos) << message;
  EXPECT_NE(message.find("got '2 gigs'"), std::string::npos) << message;
}

TEST(MemoryBudget, SizesParseAndPrint) {
  EXPECT_EQ(parse_memory_size("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(parse_memory_size("512 MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_memory_size("4GB"), int64_t{4'000'000'000});
  EXPECT_EQ(parse_memory_size("1048576"), int64_t{1} << 20);
  EXPECT_EQ(parse_memory_size("0.5kib"), 512);
  EXPECT_FALSE(parse_memory_size("").has_value());
  EXPECT_FALSE(parse_memory_size("0").has_value());
  EXPECT_FALSE(parse_memory_size("-1GiB").has_value());
  EXPECT_FALSE(parse_memory_size("2 gigs").has_value());
  EXPECT_FALSE(parse_memory_size("99999999999TiB").has_value());
  EXPECT_EQ(format_memory(512), "512 B");
  EXPECT_EQ(format_memory(int64_t{20} << 20), "20.0 MiB");
  EXPECT_EQ(format_memory(int64_t{3} << 29), "1.50 GiB");
}

}  // namespace
}  // namespace tessera::test

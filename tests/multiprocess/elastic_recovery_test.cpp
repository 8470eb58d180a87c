// In-process recovery with the `elastic` strategy: 4 gloo ranks under one
// `tessera launch --tolerate-failures 1` train the tiny gpt; rank 2 SIGKILLs
// itself at the start of step 7 (the strategy's kill_rank option). The
// other three re-form the world, restore the state after step 6 from their
// memory (the run has a checkpoint directory, written every 4 steps and
// never read) and finish. Their final parameters and optimizer state equal,
// within 1e-5, a run that trained 6 steps on 4 in-memory ranks and went on
// from that step's checkpoint on 3 (the inner strategies are exact, so
// they do not depend on the world size). With inner = "ddp" (replicated
// state: nothing moves), "zero1" (optimizer state sharded: the lost rank's
// shard comes from its neighbour's copy) and "zero3" (parameters sharded
// too).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint_tensors.hpp"
#include "engines.hpp"
#include "tessera/core/train/checkpointing.hpp"

namespace tessera::mptest {
namespace {

constexpr int kRecoverySteps = 16;
constexpr int kRecoveryKillAt = 7;
constexpr double kRecoveryTimeoutS = 10.0;
constexpr auto kRecoveryLimit = std::chrono::seconds(120);

// Skips without the gloo plugin.
class GlooTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = engine_unavailable(Engine::kGloo); !why.empty()) {
      GTEST_SKIP() << why;
    }
  }
};

class ElasticRecovery : public GlooTest, public ::testing::WithParamInterface<const char*> {};

// Small buckets for the strategies that have them (several allreduces a step).
std::vector<std::string> elastic_sets(const std::string& inner) {
  std::vector<std::string> sets = {"strategy.options.inner=\"" + inner + "\"",
                                   "strategy.options.settle_ms=500"};
  if (inner == "ddp" || inner == "zero1") {
    sets.emplace_back("strategy.options.inner_options=\"bucket_mb = 1\"");
  }
  return sets;
}

// `tessera launch -n ranks --tolerate-failures 1` of `tessera train config`
// on gloo with `sets` as --set overrides.
std::vector<std::string> elastic_launch(int ranks, const std::string& run_id,
                                        const std::filesystem::path& config,
                                        const std::vector<std::string>& sets) {
  std::vector<std::string> cmd = {TESSERA_MP_TESSERA,
                                  "launch",
                                  "-n",
                                  std::to_string(ranks),
                                  "--tolerate-failures",
                                  "1",
                                  "--run-id",
                                  run_id,
                                  "--",
                                  TESSERA_MP_TESSERA,
                                  "train",
                                  config.string(),
                                  "--set",
                                  "backend.name=\"gloo\"",
                                  "--set",
                                  "run.world_size=" + std::to_string(ranks)};
  for (const auto& s : sets) cmd.insert(cmd.end(), {"--set", s});
  return cmd;
}

TEST_P(ElasticRecovery, SurvivorsGoOnAtWorldThreeFromMemory) {
  const std::string inner = GetParam();
  const TempDir dir("elastic-recovery-" + inner);
  const auto config = write_gpt_config(dir.path(), kRecoverySteps, 4, kRecoveryTimeoutS, "elastic");
  const auto ckpt = dir.path() / "ckpt";

  // The elastic run: rank 2 dies at the start of step 7.
  std::vector<std::string> sets = elastic_sets(inner);
  sets.insert(sets.end(), {"run.log_every=4", "strategy.options.kill_rank=2",
                           "strategy.options.kill_at_step=" + std::to_string(kRecoveryKillAt)});
  const std::vector<std::string> cmd = elastic_launch(4, "elastic-" + inner, config, sets);
  const auto log = dir.path() / "elastic.log";
  const auto start = std::chrono::steady_clock::now();
  ChildProcess run(cmd, launched(log));
  const ChildExit exit = run.wait(kRecoveryLimit);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string text = read_text(log);
  ASSERT_TRUE(exit.ok()) << exit.describe() << text;
  // Usually the state after step 6; after step 5 when the lost rank's copy
  // of step 6 did not reach its neighbour (either is 4 ranks, then 3).
  EXPECT_NE(text.find("step " + std::to_string(kRecoveryKillAt) +
                      " failed; world 4 -> 3 ranks, going on from step "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("restored from the survivors' memory (no checkpoint read)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank(s) 2 lost"), std::string::npos) << text;
  EXPECT_NE(text.find("1 of 4 ranks failed, tolerated"), std::string::npos) << text;
  EXPECT_EQ(text.find("resuming from"), std::string::npos) << text;
  // The survivors went on within the timeout plus 10 s (the whole run
  // takes a few seconds more).
  EXPECT_LT(seconds, kRecoveryTimeoutS + 10.0 + 20.0) << text;

  // The reference: 6 steps on 4 in-memory ranks (a checkpoint after step
  // 6), then from there on 3.
  const auto reference = dir.path() / "reference";
  std::vector<std::string> first = elastic_sets(inner);
  first.push_back("checkpoint.dir=\"" + reference.string() + "\"");
  first.push_back("checkpoint.every=" + std::to_string(kRecoveryKillAt - 1));
  const auto first_log = dir.path() / "reference-4.log";
  ChildProcess four(train_command(Engine::kInmemory, 4, config, first, "reference"),
                    launched(first_log));
  ASSERT_TRUE(four.wait(kRecoveryLimit).ok()) << read_text(first_log);
  const auto resumed = dir.path() / "resumed";
  std::filesystem::create_directories(resumed);
  std::filesystem::copy(reference / train::checkpoint_dir_name(kRecoveryKillAt - 1),
                        resumed / train::checkpoint_dir_name(kRecoveryKillAt - 1));
  train::write_latest(resumed, kRecoveryKillAt - 1);
  std::vector<std::string> second = elastic_sets(inner);
  second.push_back("checkpoint.dir=\"" + resumed.string() + "\"");
  second.push_back("checkpoint.resume=true");
  const auto second_log = dir.path() / "reference-3.log";
  ChildProcess three(train_command(Engine::kInmemory, 3, config, second, "reference"),
                     launched(second_log));
  ASSERT_TRUE(three.wait(kRecoveryLimit).ok()) << read_text(second_log);

  const auto last = train::checkpoint_dir_name(kRecoverySteps);
  expect_close(tensors_of_file(ckpt / last / "model.safetensors"),
               tensors_of_file(resumed / last / "model.safetensors"),
               "elastic (" + inner + ") 4 -> 3 ranks at step " + std::to_string(kRecoveryKillAt));
}

// Rank 0 lost, over the default TCP store, which the launcher serves under
// --tolerate-failures (TESSERA_STORE_ADDR) and so outlives rank 0: rank 1
// becomes rank 0 of the new world and writes the log from there on, the
// metrics file included, so every logged step is in it once.
class ElasticRankZero : public GlooTest {};

TEST_F(ElasticRankZero, LosingRankZeroMovesTheLog) {
  const std::string inner = "ddp";
  const TempDir dir("elastic-rank0");
  const auto config = write_gpt_config(dir.path(), kRecoverySteps, 4, kRecoveryTimeoutS, "elastic");
  const auto metrics = dir.path() / "metrics.jsonl";
  std::vector<std::string> sets = elastic_sets(inner);
  sets.insert(sets.end(), {"strategy.options.kill_rank=0", "strategy.options.kill_at_step=7",
                           "run.log_every=4", "run.metrics=\"" + metrics.string() + "\""});
  const std::vector<std::string> cmd = elastic_launch(3, "elastic-rank0", config, sets);
  const auto log = dir.path() / "rank0.log";
  ChildProcess run(cmd, launched(log));
  const ChildExit exit = run.wait(kRecoveryLimit);
  const std::string text = read_text(log);
  ASSERT_TRUE(exit.ok()) << exit.describe() << text;
  EXPECT_NE(text.find("tessera launch: serving the ranks' TCP store on 127.0.0.1:"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[rank 1] elastic: step 7 failed; world 3 -> 2 ranks"), std::string::npos)
      << text;
  EXPECT_NE(text.find("[rank 1] summary: steps 1-" + std::to_string(kRecoverySteps)),
            std::string::npos)
      << text;
  const std::string lines = read_text(metrics);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), kRecoverySteps / 4) << lines;
}

// A rank that starts later joins the running world: 3 gloo ranks under
// `tessera launch` train with inner zero1 and wait at the start of step 5
// (wait_for_join_at_step) for a fourth `tessera train` started with
// TESSERA_JOIN=1 and the launcher's store (TESSERA_STORE_ADDR) and run id.
// The members hand it the state after step 4 from their memory, and the four
// go on. zero1 is exact, so the final state equals a run on 3 in-memory
// ranks that nobody joined, within 1e-5.
class ElasticJoin : public GlooTest {};

// The address of the TCP store the launcher writing `log` serves (under
// --tolerate-failures), once it says so; empty after 60 s.
std::string served_store(const std::filesystem::path& log) {
  const std::string serving = "tessera launch: serving the ranks' TCP store on ";
  std::string address;
  (void)eventually(std::chrono::seconds(60), [&] {
    const std::string text = read_text(log);
    const size_t at = text.find(serving);
    if (at == std::string::npos) return false;
    const size_t from = at + serving.size();
    address = text.substr(from, text.find_first_not_of("0123456789.:", from) - from);
    return true;
  });
  return address;
}

// `tessera train config` on gloo with `sets`, and how to start it as a
// process joining the run `run_id` whose store is at `address`.
std::vector<std::string> join_command(const std::filesystem::path& config,
                                      const std::vector<std::string>& sets) {
  std::vector<std::string> cmd = {TESSERA_MP_TESSERA, "train", config.string(), "--set",
                                  "backend.name=\"gloo\""};
  for (const auto& s : sets) cmd.insert(cmd.end(), {"--set", s});
  return cmd;
}
test::ChildOptions joining(const std::filesystem::path& log, const std::string& address,
                           const std::string& run_id) {
  test::ChildOptions options = launched(log);
  options.set.insert(
      options.set.end(),
      {{"TESSERA_JOIN", "1"}, {"TESSERA_STORE_ADDR", address}, {"TESSERA_RUN_ID", run_id}});
  return options;
}

TEST_F(ElasticJoin, ARankStartedLaterJoinsAtTheNextStep) {
  const TempDir dir("elastic-join");
  constexpr int kSteps = 12;
  constexpr int kJoinAt = 5;
  const auto config = write_gpt_config(dir.path(), kSteps, kSteps, kRecoveryTimeoutS, "elastic");
  std::vector<std::string> sets = elastic_sets("zero1");
  // Admitted at step kJoinAt only, however early it comes.
  sets.insert(sets.end(), {"strategy.options.join_wait_s=60", "strategy.options.join_every=0",
                           "strategy.options.wait_for_join_at_step=" + std::to_string(kJoinAt)});
  const std::string run_id = "elastic-join";
  const auto log = dir.path() / "members.log";
  ChildProcess members(elastic_launch(3, run_id, config, sets), launched(log));

  const std::string address = served_store(log);
  ASSERT_FALSE(address.empty()) << read_text(log);
  ChildProcess joiner(join_command(config, sets),
                      joining(dir.path() / "joiner.log", address, run_id));
  const ChildExit joined = joiner.wait(kRecoveryLimit);
  const ChildExit exit = members.wait(kRecoveryLimit);
  const std::string text = read_text(log);
  const std::string joiner_text = read_text(dir.path() / "joiner.log");
  ASSERT_TRUE(joined.ok()) << joined.describe() << joiner_text;
  ASSERT_TRUE(exit.ok()) << exit.describe() << text;
  EXPECT_NE(text.find("elastic: world 3 -> 4 ranks before step " + std::to_string(kJoinAt) +
                      ": rank(s) 3 joined"),
            std::string::npos)
      << text;
  EXPECT_NE(joiner_text.find("joined the running world of 3 ranks (now 4), with its state after "
                             "step " +
                             std::to_string(kJoinAt - 1)),
            std::string::npos)
      << joiner_text;
  // The members' log holds the fourth rank from then on.
  EXPECT_NE(text.find("summary: steps 1-" + std::to_string(kSteps)), std::string::npos) << text;
  EXPECT_NE(text.find("  rank 3 "), std::string::npos) << text;

  const auto reference = dir.path() / "reference";
  std::vector<std::string> plain = elastic_sets("zero1");
  plain.push_back("checkpoint.dir=\"" + reference.string() + "\"");
  const auto reference_log = dir.path() / "reference.log";
  ChildProcess three(train_command(Engine::kInmemory, 3, config, plain, "reference"),
                     launched(reference_log));
  ASSERT_TRUE(three.wait(kRecoveryLimit).ok()) << read_text(reference_log);
  const auto last = train::checkpoint_dir_name(kSteps);
  expect_close(tensors_of_file(dir.path() / "ckpt" / last / "model.safetensors"),
               tensors_of_file(reference / last / "model.safetensors"),
               "elastic (zero1) 3 -> 4 ranks at step " + std::to_string(kJoinAt));
}

// A joiner whose configuration differs (another learning rate) is admitted,
// fails the check that follows, alone, and the members recover from its
// loss like any other and finish.
TEST_F(ElasticJoin, AJoinerThatDiffersFailsAloneAndTheOthersGoOn) {
  const TempDir dir("elastic-join-differs");
  const auto config = write_gpt_config(dir.path(), 8, 8, kRecoveryTimeoutS, "elastic");
  std::vector<std::string> sets = elastic_sets("zero1");
  // The members see the joiner's abort up to the backend's probe_ms (1.5 s)
  // apart: settle_ms must cover that.
  sets.insert(sets.end(),
              {"strategy.options.join_wait_s=60", "strategy.options.join_every=0",
               "strategy.options.wait_for_join_at_step=3", "strategy.options.settle_ms=3000"});
  const std::string run_id = "elastic-join-differs";
  const auto log = dir.path() / "members.log";
  ChildProcess members(elastic_launch(2, run_id, config, sets), launched(log));
  const std::string address = served_store(log);
  ASSERT_FALSE(address.empty()) << read_text(log);
  std::vector<std::string> other = sets;
  other.emplace_back("optimizer.lr=0.01");
  const auto joiner_log = dir.path() / "joiner.log";
  ChildProcess joiner(join_command(config, other), joining(joiner_log, address, run_id));
  const ChildExit joined = joiner.wait(kRecoveryLimit);
  const ChildExit exit = members.wait(kRecoveryLimit);
  const std::string text = read_text(log);
  const std::string joiner_text = read_text(joiner_log);
  EXPECT_FALSE(joined.ok()) << joiner_text;
  // Named by its rank in the world it joined, not as rank 0 of its own.
  EXPECT_NE(joiner_text.find("rank 2: the ranks' configurations differ: rank 2 has optimizer.lr = "
                             "0.01 where rank 0 has 0.003"),
            std::string::npos)
      << joiner_text;
  ASSERT_TRUE(exit.ok()) << exit.describe() << text;
  EXPECT_NE(text.find("rank(s) 2 lost; world 3 -> 2"), std::string::npos) << text;
  EXPECT_NE(text.find("summary: steps 1-8"), std::string::npos) << text;
}

// What a joining process is refused, each before it trains a step: a bad
// TESSERA_JOIN, a strategy that cannot admit it, a backend that cannot, and
// no running world admitting it within join_wait_s (it withdraws and says
// what it waited for). Through the file store: nothing else is running.
TEST_F(ElasticJoin, WhatCannotJoinSaysWhy) {
  const TempDir dir("elastic-join-refused");
  const auto config = write_gpt_config(dir.path(), 4, 4, kRecoveryTimeoutS, "elastic");
  const auto store = dir.path() / "store";
  std::filesystem::create_directories(store);
  const auto attempt = [&](const std::string& join, const std::vector<std::string>& sets) {
    std::vector<std::string> cmd = {TESSERA_MP_TESSERA, "train", config.string()};
    for (const auto& s : sets) cmd.insert(cmd.end(), {"--set", s});
    const auto log = dir.path() / "attempt.log";
    test::ChildOptions options = launched(log);
    options.set.emplace_back("TESSERA_JOIN", join);
    ChildProcess child(cmd, options);
    const ChildExit exit = child.wait(kRecoveryLimit);
    EXPECT_FALSE(exit.ok()) << read_text(log);
    return read_text(log);
  };
  const std::string gloo = "backend.name=\"gloo\"";
  const std::string file = "backend.options.store=\"file\"";
  const std::string dir_set = "backend.options.store_dir=\"" + store.string() + "\"";
  std::string text = attempt("2", {gloo, file, dir_set});
  EXPECT_NE(text.find("TESSERA_JOIN = '2': must be 1 (join the running world) or 0"),
            std::string::npos)
      << text;
  text = attempt("1", {gloo, file, dir_set, "strategy.name=\"ddp\""});
  EXPECT_NE(text.find("this strategy cannot admit a rank into a running world (TESSERA_JOIN=1): "
                      "joining needs the elastic strategy"),
            std::string::npos)
      << text;
  text = attempt("1", {"backend.name=\"inmemory\""});
  EXPECT_NE(text.find("TESSERA_JOIN=1: backend 'inmemory'"), std::string::npos) << text;
  EXPECT_NE(text.find("cannot admit a process into a running world"), std::string::npos) << text;
  text = attempt("1", {gloo, file, dir_set, "strategy.options.join_wait_s=1"});
  EXPECT_NE(text.find("waiting for admission into the running world of run"), std::string::npos)
      << text;
  EXPECT_NE(text.find("timed out after"), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(Inner, ElasticRecovery, ::testing::Values("ddp", "zero1", "zero3"),
                         [](const auto& p) { return std::string(p.param); });

}  // namespace
}  // namespace tessera::mptest

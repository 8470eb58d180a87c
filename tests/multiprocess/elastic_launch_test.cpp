// Elastic launches: three `tessera launch --nnodes 2:3 --max-restarts 1`
// side by side on this machine, one rank each, training the tiny gpt with
// ddp on gloo and a checkpoint every few steps (`checkpoint.resume = true`).
//
// - A node lost: the launcher that started the rendezvous store is
//   SIGKILLed mid-run; its rank dies with it (the store lives on in a
//   process of its own). The other two stop their
//   ranks, meet again as a world of 2 and resume from the last checkpoint.
//   Their final parameters and optimizer state equal, within 1e-5, a run
//   that resumes a copy of that same checkpoint on 2 in-memory ranks (ddp
//   does not depend on the world size, so this is the 3 -> 2 run).
// - A node joining: two launchers start a round of 2; a third started later
//   waits; when a rank of the first round fails, the next round has all
//   three nodes and finishes.
// Every wait is bounded; the children are killed when a test ends.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "../support/loopback.hpp"
#include "checkpoint_tensors.hpp"
#include "engines.hpp"
#include "tessera/core/train/checkpointing.hpp"

namespace tessera::mptest {
namespace {

constexpr int kElasticSteps = 160;
constexpr int kElasticCheckpointEvery = 8;
constexpr auto kElasticLimit = std::chrono::seconds(120);

struct ElasticNode {
  std::string tag;
  std::filesystem::path log;
  std::unique_ptr<ChildProcess> process;
};

// Starts one elastic launcher of one rank on `port`; its rank carries
// TESSERA_TEST_MARK=`tag`.
ElasticNode start_elastic_node(const TempDir& dir, const std::filesystem::path& config, int port,
                               const std::string& tag) {
  ElasticNode l;
  l.tag = tag;
  l.log = dir.path() / (tag + ".log");
  test::ChildOptions options = launched(l.log);
  options.set.emplace_back("TESSERA_TEST_MARK", tag);
  options.unset = {"TESSERA_RENDEZVOUS_DIR", "TESSERA_RUN_ID", "MASTER_ADDR", "MASTER_PORT"};
  l.process = std::make_unique<ChildProcess>(std::vector<std::string>{TESSERA_MP_TESSERA,
                                                                      "launch",
                                                                      "-n",
                                                                      "1",
                                                                      "--nnodes",
                                                                      "2:3",
                                                                      "--max-restarts",
                                                                      "1",
                                                                      "--master-addr",
                                                                      "127.0.0.1",
                                                                      "--master-port",
                                                                      std::to_string(port),
                                                                      "--rdzv-timeout",
                                                                      "60",
                                                                      "--rdzv-last-call",
                                                                      "1",
                                                                      "--",
                                                                      TESSERA_MP_TESSERA,
                                                                      "train",
                                                                      config.string(),
                                                                      "--set",
                                                                      "backend.name=\"gloo\"",
                                                                      "--set",
                                                                      "checkpoint.resume=true"},
                                             options);
  return l;
}

bool node_log_has(const ElasticNode& l, const std::string& text) {
  return read_text(l.log).find(text) != std::string::npos;
}

std::string node_logs(const std::vector<ElasticNode>& launchers) {
  std::string text;
  for (const ElasticNode& l : launchers) text += "\n--- " + l.tag + ":\n" + read_text(l.log);
  return text;
}

// The step the run resumed from in `log` ("resuming from ... (step 40)").
std::optional<int64_t> resumed_step(const std::string& log) {
  const std::regex line("resuming from .* \\(step ([0-9]+)\\)");
  std::smatch m;
  if (!std::regex_search(log, m, line)) return std::nullopt;
  return std::stoll(m[1].str());
}

class ElasticLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = engine_unavailable(Engine::kGloo); !why.empty()) {
      GTEST_SKIP() << why;
    }
  }
};

TEST_F(ElasticLaunch, LostNodeRestartsTheOthersAtWorldTwoFromTheCheckpoint) {
  const TempDir dir("elastic-lost");
  const auto config = write_gpt_config(dir.path(), kElasticSteps, kElasticCheckpointEvery, 20.0);
  const auto ckpt = dir.path() / "ckpt";
  const int port = test::free_loopback_port();
  std::vector<ElasticNode> launchers;
  for (const char* tag : {"a", "b", "c"}) {
    launchers.push_back(start_elastic_node(dir, config, port, tag));
  }
  // Mid-run: every node is in round 0 and a few checkpoints are complete.
  ASSERT_TRUE(eventually(kElasticLimit, [&] {
    return latest_step(ckpt) >= 3 * kElasticCheckpointEvery;
  })) << node_logs(launchers);
  for (const ElasticNode& l : launchers) {
    ASSERT_TRUE(node_log_has(l, "round 0: 3 nodes")) << node_logs(launchers);
  }
  // The node that started the rendezvous store goes away: the store, in a
  // process of its own, stays for the others.
  ElasticNode* lost = nullptr;
  for (ElasticNode& l : launchers) {
    if (node_log_has(l, "serving the rendezvous store")) lost = &l;
  }
  ASSERT_NE(lost, nullptr) << node_logs(launchers);
  std::smatch node;
  const std::string lost_log = read_text(lost->log);
  ASSERT_TRUE(
      std::regex_search(lost_log, node, std::regex("round 0: 3 nodes .*this is node ([0-2])")))
      << lost_log;
  lost->process->signal(SIGKILL);

  for (ElasticNode& l : launchers) {
    if (&l == lost) continue;
    const ChildExit exit = l.process->wait(kElasticLimit);
    ASSERT_TRUE(exit.ok()) << l.tag << " " << exit.describe() << node_logs(launchers);
    EXPECT_TRUE(node_log_has(l, "elastic: round 0 failed")) << node_logs(launchers);
    EXPECT_TRUE(node_log_has(l, "restarting on the nodes left (restart 1 of 1)"))
        << node_logs(launchers);
    EXPECT_TRUE(node_log_has(l, "round 1: 2 nodes")) << node_logs(launchers);
    EXPECT_TRUE(node_log_has(l, "elastic: gone since round 0: node " + node[1].str() + " ("))
        << node_logs(launchers);
    EXPECT_TRUE(node_log_has(l, "round 1 finished on this node")) << node_logs(launchers);
  }
  (void)lost->process->wait(std::chrono::seconds(10));
  // The round-1 rank 0 logged the resume at the new world size.
  std::optional<int64_t> step;
  for (const ElasticNode& l : launchers) {
    if (&l == lost) continue;
    const std::string text = read_text(l.log);
    if (const auto s = resumed_step(text)) {
      step = s;
      EXPECT_NE(text.find("resharding 3 -> 2 ranks"), std::string::npos) << text;
    }
  }
  ASSERT_TRUE(step.has_value()) << node_logs(launchers);
  EXPECT_GE(*step, 3 * kElasticCheckpointEvery);
  EXPECT_LT(*step, kElasticSteps);

  // The reference: a copy of that checkpoint resumed on two in-memory ranks.
  const auto reference = dir.path() / "reference";
  std::filesystem::create_directories(reference);
  std::filesystem::copy(ckpt / train::checkpoint_dir_name(*step),
                        reference / train::checkpoint_dir_name(*step));
  train::write_latest(reference, *step);
  const auto reference_log = dir.path() / "reference.log";
  ChildProcess resumed(
      train_command(Engine::kInmemory, 2, config,
                    {"checkpoint.resume=true", "checkpoint.dir=\"" + reference.string() + "\""},
                    "reference"),
      launched(reference_log));
  const ChildExit exit = resumed.wait(kElasticLimit);
  ASSERT_TRUE(exit.ok()) << exit.describe() << read_text(reference_log);

  const auto last = train::checkpoint_dir_name(kElasticSteps);
  expect_close(tensors_of_file(ckpt / last / "model.safetensors"),
               tensors_of_file(reference / last / "model.safetensors"),
               "elastic run 3 -> 2 nodes from step " + std::to_string(*step));
}

TEST_F(ElasticLaunch, LateNodeJoinsAtTheNextRestart) {
  const TempDir dir("elastic-join");
  const auto config = write_gpt_config(dir.path(), kElasticSteps, kElasticCheckpointEvery, 20.0);
  const auto ckpt = dir.path() / "ckpt";
  const int port = test::free_loopback_port();
  std::vector<ElasticNode> launchers;
  launchers.push_back(start_elastic_node(dir, config, port, "a"));
  launchers.push_back(start_elastic_node(dir, config, port, "b"));
  ASSERT_TRUE(eventually(kElasticLimit, [&] {
    return node_log_has(launchers[0], "round 0: 2 nodes") &&
           node_log_has(launchers[1], "round 0: 2 nodes");
  })) << node_logs(launchers);

  launchers.push_back(start_elastic_node(dir, config, port, "c"));
  ASSERT_TRUE(eventually(kElasticLimit, [&] {
    return node_log_has(launchers[2], "round 0 closed with 2 nodes before this one joined");
  })) << node_logs(launchers);
  ASSERT_TRUE(eventually(kElasticLimit, [&] {
    return latest_step(ckpt) >= 2 * kElasticCheckpointEvery;
  })) << node_logs(launchers);
  // A rank of round 0 fails; its launcher stays.
  const std::vector<pid_t> rank =
      processes_with_env({{"TESSERA_TEST_MARK", "b"}, {"TESSERA_RESTART_COUNT", "0"}});
  ASSERT_FALSE(rank.empty()) << node_logs(launchers);
  for (const pid_t pid : rank) ::kill(pid, SIGKILL);

  for (ElasticNode& l : launchers) {
    const ChildExit exit = l.process->wait(kElasticLimit);
    ASSERT_TRUE(exit.ok()) << l.tag << " " << exit.describe() << node_logs(launchers);
    EXPECT_TRUE(node_log_has(l, "round 1: 3 nodes")) << node_logs(launchers);
    EXPECT_TRUE(node_log_has(l, "elastic: new since round 0: node ")) << node_logs(launchers);
    EXPECT_FALSE(node_log_has(l, "gone since round 0")) << node_logs(launchers);
    EXPECT_TRUE(node_log_has(l, "round 1 finished on this node")) << node_logs(launchers);
  }
  EXPECT_TRUE(std::filesystem::exists(ckpt / train::checkpoint_dir_name(kElasticSteps)))
      << node_logs(launchers);
  EXPECT_NE(node_logs(launchers).find("resharding 2 -> 3 ranks"), std::string::npos)
      << node_logs(launchers);
}

}  // namespace
}  // namespace tessera::mptest

// Two "machines" on this one: two `tessera launch --nnodes 2 --node-rank K`
// started side by side, each running one rank of `tessera train` on gloo,
// told only MASTER_ADDR and MASTER_PORT (no store option, no shared
// directory, no Redis). Both join one world and train (the loss falls), and
// rank 0's TCP store removes the run's keys when it stops. Every wait is bounded.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "../support/child_process.hpp"
#include "../support/loopback.hpp"
#include "../support/temp_dir.hpp"
#include "process_ranks.hpp"

#ifndef TESSERA_GLOO_TEST_CLI
#error "TESSERA_GLOO_TEST_CLI must name the tessera executable"
#endif

namespace tessera::glootest {
namespace {

std::filesystem::path write_config(const std::filesystem::path& dir) {
  auto path = dir / "run.toml";
  std::ofstream out(path);
  out << "[run]\nworld_size = 2\nsteps = 8\nseed = 3\nlog_every = 1\nlog_level = \"debug\"\n\n"
      << "[backend]\nname = \"gloo\"\ntimeout_s = 20\n\n"
      << "[strategy]\nname = \"ddp\"\n\n"
      << "[model]\nname = \"mlp\"\n\n"
      << "[optimizer]\nname = \"sgd\"\nlr = 0.1\n";
  return path;
}

// The loss of step `step` in `out` ("step 3/8 | loss 2.2922 | ..."), if any.
std::optional<double> loss_at(const std::string& out, int step) {
  const std::regex line("step " + std::to_string(step) + "/[0-9]+ \\| loss ([0-9.]+)");
  std::smatch m;
  if (!std::regex_search(out, m, line)) return std::nullopt;
  return std::stod(m[1].str());
}

struct Node {
  test::ChildExit exit;
  std::string out;
};

// Starts both launchers on `port` at once and waits for them (bounded).
std::vector<Node> launch_two(const std::filesystem::path& config, int port) {
  std::vector<std::unique_ptr<test::ChildProcess>> launchers;
  for (const int node : {0, 1}) {
    test::ChildOptions options;
    options.own_group = true;
    options.unset = {"TESSERA_RENDEZVOUS_DIR", "TESSERA_RUN_ID", "MASTER_ADDR", "MASTER_PORT"};
    options.set = {{"TESSERA_PLUGIN_PATH", TESSERA_GLOO_TEST_PLUGIN_DIR}};
    launchers.push_back(std::make_unique<test::ChildProcess>(
        std::vector<std::string>{TESSERA_GLOO_TEST_CLI, "launch", "--nnodes", "2", "--node-rank",
                                 std::to_string(node), "--master-addr", "127.0.0.1",
                                 "--master-port", std::to_string(port), "-n", "1", "--",
                                 TESSERA_GLOO_TEST_CLI, "train", config.string()},
        options));
  }
  std::vector<Node> nodes;
  for (auto& l : launchers) {
    Node n;
    n.exit = l->wait(std::chrono::seconds(60));
    n.out = l->out() + l->err();
    nodes.push_back(std::move(n));
  }
  return nodes;
}

TEST(GlooLaunch, TwoNodesMeetWithOnlyMasterAddrAndPort) {
  const test::TempDir dir("gloo-tcp");
  const auto config = write_config(dir.path());
  std::vector<Node> nodes;
  int port = 0;
  // The port is free when chosen; another program may take it before rank
  // 0 binds it, so an address in use is tried again on another port.
  for (int attempt = 0; attempt < 3; ++attempt) {
    port = test::free_loopback_port();
    nodes = launch_two(config, port);
    if (nodes[0].out.find("in use") == std::string::npos) break;
  }
  const std::string both = "\n--- node 0:\n" + nodes[0].out + "\n--- node 1:\n" + nodes[1].out;
  ASSERT_TRUE(nodes[0].exit.ok()) << nodes[0].exit.describe() << both;
  ASSERT_TRUE(nodes[1].exit.ok()) << nodes[1].exit.describe() << both;

  const std::string store = "TCP store at 127.0.0.1:" + std::to_string(port);
  EXPECT_NE(nodes[0].out.find("[rank 0]"), std::string::npos) << both;
  EXPECT_NE(nodes[1].out.find("[rank 1]"), std::string::npos) << both;
  EXPECT_NE(nodes[1].out.find(store), std::string::npos) << both;
  EXPECT_NE(nodes[0].out.find("rank 0 serves the TCP store on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << both;
  EXPECT_EQ(nodes[1].out.find("serves the TCP store"), std::string::npos) << both;

  // One run of two ranks, whose loss (logged by rank 0) falls.
  for (const Node& n : nodes) {
    EXPECT_NE(n.out.find("gloo: world of 2 ranks connected"), std::string::npos) << both;
  }
  const auto first = loss_at(nodes[0].out, 1);
  const auto last = loss_at(nodes[0].out, 8);
  ASSERT_TRUE(first && last) << both;
  EXPECT_LT(*last, *first) << both;

  // The run's keys are gone when rank 0's store stops.
  const std::regex cleanup("the TCP store on 127\\.0\\.0\\.1:" + std::to_string(port) +
                           " removed the ([0-9]+) keys of run '127\\.0\\.0\\.1:" +
                           std::to_string(port) + "' and stopped holding 0 keys");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(nodes[0].out, m, cleanup)) << both;
  EXPECT_GT(std::stoi(m[1].str()), 0) << both;
}

}  // namespace
}  // namespace tessera::glootest

// `tessera launch` gives each rank the torchrun-style environment: every
// child prints its variables and the test checks them rank by rank.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "cli_process.hpp"

namespace tessera::launch_test {
namespace {

using Vars = std::map<std::string, std::string>;

// Prints every variable the launcher sets (and one passed-through marker)
// as NAME=VALUE words on one line, then whether the rendezvous directory
// exists and is private to this user, after writing a file into it.
const char* const kPrintEnv =
    "d=${TESSERA_RENDEZVOUS_DIR-}; exists=no; mode=none; "
    "if [ -n \"$d\" ] && [ -d \"$d\" ]; then exists=yes; touch \"$d/key-$RANK\"; "
    "mode=$(stat -c %a \"$d\"); fi; "
    "echo RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK "
    "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK MASTER_ADDR=$MASTER_ADDR "
    "MASTER_PORT=$MASTER_PORT TESSERA_RUN_ID=$TESSERA_RUN_ID "
    "TESSERA_RENDEZVOUS_DIR=${d:-unset} DIR_EXISTS=$exists DIR_MODE=$mode "
    "MARK=${LAUNCH_TEST_MARK:-unset}";

// Parses the "[rank R] NAME=VALUE ..." lines of the launcher's stdout into
// the variables of each prefix rank; fails the test on a malformed line.
std::map<int, Vars> vars_by_rank(const std::string& out) {
  std::map<int, Vars> result;
  for (const std::string& line : lines_of(out)) {
    int rank = -1;
    std::istringstream in(line);
    std::string tag;
    in >> tag >> rank >> tag;  // "[rank", R, "]"
    EXPECT_EQ(tag, "]") << "line without a rank prefix: " << line;
    std::string word;
    while (in >> word) {
      const std::size_t eq = word.find('=');
      EXPECT_NE(eq, std::string::npos) << line;
      result[rank][word.substr(0, eq)] = word.substr(eq + 1);
    }
  }
  return result;
}

// `tessera launch FLAGS... -- /bin/sh -c kPrintEnv`.
std::vector<std::string> launch_args(const std::vector<std::string>& flags) {
  std::vector<std::string> args;
  args.reserve(flags.size() + 5);
  args.emplace_back("launch");
  for (const std::string& flag : flags) args.push_back(flag);
  for (const char* word : {"--", "/bin/sh", "-c", kPrintEnv}) args.emplace_back(word);
  return args;
}

TEST(LaunchEnv, ThreeRanksOnOneNode) {
  const TempDir tmp;
  const CliResult r = run_cli(launch_args({"-n", "3"}),
                              env_setting({"TMPDIR=" + tmp.path().string(),
                                           "LAUNCH_TEST_MARK=passed", "RANK=99", "WORLD_SIZE=99"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto vars = vars_by_rank(r.out);
  ASSERT_EQ(vars.size(), 3U) << r.out;
  std::set<std::string> run_ids;
  std::set<std::string> ports;
  std::set<std::string> dirs;
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_EQ(vars.count(rank), 1U) << r.out;
    const Vars& v = vars.at(rank);
    EXPECT_EQ(v.at("RANK"), std::to_string(rank));
    EXPECT_EQ(v.at("WORLD_SIZE"), "3");
    EXPECT_EQ(v.at("LOCAL_RANK"), std::to_string(rank));
    EXPECT_EQ(v.at("LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(v.at("GROUP_RANK"), "0");
    EXPECT_EQ(v.at("MASTER_ADDR"), "127.0.0.1");
    const int port = std::stoi(v.at("MASTER_PORT"));
    EXPECT_GE(port, 1);
    EXPECT_LE(port, 65535);
    EXPECT_EQ(v.at("TESSERA_RUN_ID").size(), 16U);
    EXPECT_EQ(v.at("DIR_EXISTS"), "yes");
    EXPECT_EQ(v.at("DIR_MODE"), "700");
    EXPECT_EQ(v.at("MARK"), "passed");  // other variables pass through
    EXPECT_EQ(std::filesystem::path(v.at("TESSERA_RENDEZVOUS_DIR")).parent_path(), tmp.path());
    run_ids.insert(v.at("TESSERA_RUN_ID"));
    ports.insert(v.at("MASTER_PORT"));
    dirs.insert(v.at("TESSERA_RENDEZVOUS_DIR"));
  }
  EXPECT_EQ(run_ids.size(), 1U);
  EXPECT_EQ(ports.size(), 1U);
  ASSERT_EQ(dirs.size(), 1U);
  // The directory, with the files the ranks wrote into it, is gone.
  EXPECT_FALSE(std::filesystem::exists(*dirs.begin()));
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path()));
}

TEST(LaunchEnv, EachLaunchGetsItsOwnRunId) {
  const TempDir tmp;
  const CliEnv env = env_setting({"TMPDIR=" + tmp.path().string()});
  const CliResult first = run_cli(launch_args({"-n", "1"}), env);
  const CliResult second = run_cli(launch_args({"-n", "1"}), env);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(vars_by_rank(first.out)[0].at("TESSERA_RUN_ID"),
            vars_by_rank(second.out)[0].at("TESSERA_RUN_ID"));
}

TEST(LaunchEnv, SecondOfTwoNodes) {
  const TempDir tmp;
  const CliResult r = run_cli(launch_args({"-n", "2", "--nnodes", "2", "--node-rank", "1",
                                           "--master-addr", "127.0.0.1", "--master-port", "29517"}),
                              env_setting({"TMPDIR=" + tmp.path().string()}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto vars = vars_by_rank(r.out);
  ASSERT_EQ(vars.size(), 2U) << r.out;
  for (int local = 0; local < 2; ++local) {
    const int rank = 2 + local;
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_EQ(vars.count(rank), 1U) << r.out;
    const Vars& v = vars.at(rank);
    EXPECT_EQ(v.at("RANK"), std::to_string(rank));
    EXPECT_EQ(v.at("WORLD_SIZE"), "4");
    EXPECT_EQ(v.at("LOCAL_RANK"), std::to_string(local));
    EXPECT_EQ(v.at("LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(v.at("GROUP_RANK"), "1");
    EXPECT_EQ(v.at("MASTER_PORT"), "29517");
    // Every node derives the same id from the master when none is given.
    EXPECT_EQ(v.at("TESSERA_RUN_ID"), "127.0.0.1:29517");
    // No private directory: the nodes do not share this machine's /tmp.
    EXPECT_EQ(v.at("TESSERA_RENDEZVOUS_DIR"), "unset");
  }
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path()));
}

TEST(LaunchEnv, ExplicitRunIdPortAndAddress) {
  const CliResult r = run_cli(launch_args(
      {"-n", "1", "--run-id", "job-42", "--master-port", "29533", "--master-addr", "localhost"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const Vars v = vars_by_rank(r.out)[0];
  EXPECT_EQ(v.at("TESSERA_RUN_ID"), "job-42");
  EXPECT_EQ(v.at("MASTER_PORT"), "29533");
  EXPECT_EQ(v.at("MASTER_ADDR"), "localhost");
}

TEST(LaunchEnv, KeepsAGivenRendezvousDirectory) {
  const TempDir tmp;
  const std::filesystem::path mine = tmp.path() / "mine";
  std::filesystem::create_directory(mine);
  const CliResult r =
      run_cli(launch_args({"-n", "2"}), env_setting({"TESSERA_RENDEZVOUS_DIR=" + mine.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto vars = vars_by_rank(r.out);
  ASSERT_EQ(vars.size(), 2U);
  for (const auto& [rank, v] : vars) {
    EXPECT_EQ(v.at("TESSERA_RENDEZVOUS_DIR"), mine.string());
    EXPECT_EQ(v.at("DIR_EXISTS"), "yes");
  }
  EXPECT_TRUE(std::filesystem::exists(mine / "key-0"));
  EXPECT_TRUE(std::filesystem::exists(mine / "key-1"));
}

}  // namespace
}  // namespace tessera::launch_test

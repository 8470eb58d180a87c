// Command lines `tessera launch` refuses: exit code 2 and one message naming
// the flag and the value, before any process is started.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "cli_process.hpp"

namespace tessera::launch_test {
namespace {

struct UsageCase {
  const char* name;
  std::vector<std::string> args;  // after "launch"
  const char* message;            // expected after "tessera: error: "
};

// Test names show the case name rather than the object's bytes.
void PrintTo(const UsageCase& c, std::ostream* os) { *os << c.name; }

class LaunchUsage : public ::testing::TestWithParam<UsageCase> {};

TEST_P(LaunchUsage, IsRefusedWithAMessage) {
  const UsageCase& c = GetParam();
  std::vector<std::string> args = {"launch"};
  args.insert(args.end(), c.args.begin(), c.args.end());
  const CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const std::string expected = std::string("tessera: error: ") + c.message;
  EXPECT_EQ(r.err.substr(0, expected.size()), expected) << r.err;
  EXPECT_EQ(r.out, "");
}

const std::vector<UsageCase> kCases = {
    {"MissingSeparator", {"-n", "2", "/bin/true"}, "missing '--' before the command '/bin/true'"},
    {"MissingCommand", {"-n", "2", "--"}, "missing COMMAND after '--'"},
    {"MissingRankCount", {"--", "/bin/true"}, "--nproc-per-node is required"},
    {"ZeroRanks", {"-n", "0", "--", "/bin/true"}, "-n/--nproc-per-node must be at least 1, got 0"},
    {"NegativeRanks",
     {"--nproc-per-node=-2", "--", "/bin/true"},
     "-n/--nproc-per-node must be at least 1, got -2"},
    {"ZeroNodes",
     {"-n", "1", "--nnodes", "0", "--", "/bin/true"},
     "--nnodes must be at least 1, got 0"},
    {"NodeRankTooLarge",
     {"-n", "1", "--nnodes", "2", "--node-rank", "2", "--master-addr", "10.0.0.1", "--master-port",
      "29500", "--", "/bin/true"},
     "--node-rank 2 is outside [0, 2) (--nnodes 2)"},
    {"NodeRankNegative",
     {"-n", "1", "--node-rank=-1", "--", "/bin/true"},
     "--node-rank -1 is outside [0, 1) (--nnodes 1)"},
    {"PortTooLarge",
     {"-n", "1", "--master-port", "70000", "--", "/bin/true"},
     "--master-port must be a TCP port in 1..65535, got 70000"},
    {"PortZero",
     {"-n", "1", "--master-port", "0", "--", "/bin/true"},
     "--master-port must be a TCP port in 1..65535, got 0"},
    {"SeveralNodesWithPortZero",
     {"-n", "1", "--nnodes", "2", "--master-addr", "10.0.0.1", "--master-port", "0", "--",
      "/bin/true"},
     "--master-port must be a TCP port in 1..65535, got 0"},
    {"SeveralNodesWithoutAddress",
     {"-n", "1", "--nnodes", "2", "--master-port", "29500", "--", "/bin/true"},
     "--master-addr is required with --nnodes 2"},
    {"SeveralNodesWithoutPort",
     {"-n", "1", "--nnodes", "2", "--master-addr", "10.0.0.1", "--", "/bin/true"},
     "--master-port is required with --nnodes 2"},
    {"NodesNotANumber",
     {"-n", "1", "--nnodes", "two", "--", "/bin/true"},
     "--nnodes must be a node count N or a range MIN:MAX, got 'two'"},
    {"NodeRangeBackwards",
     {"-n", "1", "--nnodes", "3:2", "--", "/bin/true"},
     "--nnodes 3:2: the maximum 2 is below the minimum 3"},
    {"NodeRangeFromZero",
     {"-n", "1", "--nnodes", "0:2", "--", "/bin/true"},
     "--nnodes must be at least 1, got 0"},
    {"ElasticWithoutPort",
     {"-n", "1", "--nnodes", "1:3", "--master-addr", "10.0.0.1", "--", "/bin/true"},
     "--master-port is required with --nnodes 1:3"},
    {"ElasticWithNodeRank",
     {"-n", "1", "--nnodes", "1:2", "--node-rank", "0", "--master-addr", "10.0.0.1",
      "--master-port", "29500", "--", "/bin/true"},
     "--node-rank cannot be given to an elastic launch (--nnodes 1:2, --max-restarts 0)"},
    {"NegativeRestarts",
     {"-n", "1", "--max-restarts=-1", "--", "/bin/true"},
     "--max-restarts must be zero or more, got -1"},
    {"NegativeRendezvousTimeout",
     {"-n", "1", "--max-restarts", "1", "--rdzv-timeout=-5", "--", "/bin/true"},
     "--rdzv-timeout must be zero or more seconds, got -5"},
    {"NegativeGrace",
     {"-n", "1", "--grace=-1", "--", "/bin/true"},
     "--grace must be zero or more seconds, got -1"},
    {"NegativeToleratedFailures",
     {"-n", "2", "--tolerate-failures", "-1", "--", "/bin/true"},
     "--tolerate-failures must be zero or more, got -1"},
};

INSTANTIATE_TEST_SUITE_P(Launch, LaunchUsage, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<UsageCase>& param_info) {
                           return std::string(param_info.param.name);
                         });

// CLI11's own message for a value that is not a number names the flag.
TEST(LaunchUsageMessage, NonNumericPortNamesTheFlag) {
  const CliResult r = run_cli({"launch", "-n", "1", "--master-port", "http", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--master-port"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("http"), std::string::npos) << r.err;
}

TEST(LaunchUsageMessage, NonIntegerToleratedFailuresNamesTheFlag) {
  const CliResult r =
      run_cli({"launch", "-n", "2", "--tolerate-failures", "1.5", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--tolerate-failures"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1.5"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace tessera::launch_test

// Ranks that disagree: one rank of a `tessera train` run started by mpirun or
// `tessera launch` gets one configuration value of its own (through a
// wrapper that adds a --set on rank 1 only). Every run must end within the
// timeout with a non-zero exit and the error naming rank 1 and the key,
// never with a signal, a Gloo enforcement abort or training to the end.
// (In-memory ranks share one configuration, so they cannot disagree.)
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "engines.hpp"

namespace tessera::mptest {
namespace {

struct DisagreeCase {
  Engine engine;
  std::string set;       // the override rank 1 gets
  std::string expected;  // what the error must say
};

std::string disagree_name(const ::testing::TestParamInfo<DisagreeCase>& p) {
  std::string key = p.param.set.substr(0, p.param.set.find('='));
  std::replace(key.begin(), key.end(), '.', '_');
  return std::string(engine_name(p.param.engine)) + "_" + key;
}

// A script that runs its arguments, adding `--set <set>` on rank 1.
std::filesystem::path write_rank1_wrapper(const std::filesystem::path& dir,
                                          const std::string& set) {
  const auto path = dir / "rank1_set.sh";
  {
    std::ofstream out(path);
    out << "#!/bin/sh\n"
        << "r=\"${OMPI_COMM_WORLD_RANK:-${RANK:-0}}\"\n"
        << "if [ \"$r\" = 1 ]; then exec \"$@\" --set '" << set << "'; fi\n"
        << "exec \"$@\"\n";
  }
  ::chmod(path.c_str(), 0755);
  return path;
}

class Disagree : public ::testing::TestWithParam<DisagreeCase> {};

TEST_P(Disagree, EveryRankStopsNamingTheRankAndTheKey) {
  const DisagreeCase& param = GetParam();
  if (const std::string why = engine_unavailable(param.engine); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("disagree");
  const auto config = write_gpt_config(dir.path(), 6, 100, 20.0);
  const auto wrapper = write_rank1_wrapper(dir.path(), param.set);
  std::vector<std::string> command = train_command(param.engine, 2, config, {}, "disagree");
  // Plain mpirun: its exit status reports the failed ranks.
  const auto recovery = std::find(command.begin(), command.end(), "--enable-recovery");
  if (recovery != command.end()) command.erase(recovery);
  const auto train = std::find(command.begin(), command.end(), "train");
  ASSERT_NE(train, command.end());
  command.insert(train - 1, wrapper.string());

  const auto log = dir.path() / "run.log";
  ChildProcess run(command, launched(log));
  const ChildExit exit = run.wait(std::chrono::seconds(90));
  const std::string text = read_text(log);
  ASSERT_FALSE(exit.timed_out) << "the ranks hung:\n" << text;
  EXPECT_NE(exit.code, 0) << "the run succeeded although rank 1's configuration differs:\n" << text;
  EXPECT_EQ(exit.signal, 0) << text;
  EXPECT_NE(text.find("the ranks' configurations differ: " + param.expected), std::string::npos)
      << text;
  for (const char* crash : {"terminate called", "EnforceNotMet", "Segmentation fault", "signal 11",
                            "signal 6", "MPI_ERR_TRUNCATE", "corrupt"}) {
    EXPECT_EQ(text.find(crash), std::string::npos) << crash << " in:\n" << text;
  }
  EXPECT_EQ(text.find("summary:"), std::string::npos) << "a rank trained to the end:\n" << text;
}

std::vector<DisagreeCase> disagree_cases() {
  std::vector<DisagreeCase> cases;
  for (const Engine e : {Engine::kMpi, Engine::kGloo}) {
    cases.push_back({e, "optimizer.lr=0.02", "rank 1 has optimizer.lr = 0.02 where rank 0 has"});
    cases.push_back({e, "run.steps=7", "rank 1 has run.steps = 7 where rank 0 has 6"});
    cases.push_back({e, "strategy.name=\"zero1\"",
                     "rank 1 has strategy.name = \"zero1\" where rank 0 has \"ddp\""});
    cases.push_back({e, "model.d_model=48", "rank 1 has model.d_model = 48 where rank 0 has 32"});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Backends, Disagree, ::testing::ValuesIn(disagree_cases()), disagree_name);

}  // namespace
}  // namespace tessera::mptest

// Running a few gloo ranks as forked child processes of a test.
//
// Each child gets RANK, WORLD_SIZE, a private TESSERA_RENDEZVOUS_DIR and
// TESSERA_RUN_ID, runs the scenario, reports one line of text through a
// file and exits with the scenario's code (test::ChildProcess). The parent waits for every child
// up to a limit and kills (SIGKILL) and reaps whatever is still running, so
// a test can never hang and never leaves a process behind.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/comm.hpp"

namespace tessera::glootest {

// What one child did.
struct RankOutcome {
  int rank = -1;
  int exit_code = -1;  // exit status, or -N when killed by signal N
  std::string text;    // what the scenario reported
};

// A scenario run in child `rank`: returns the exit code and sets `text`.
using Scenario = std::function<int(int rank, std::string& text)>;

// Starts one child per entry of `ranks` (each a rank of a world of
// `world_size`) with `env` added to its environment, and waits for all of
// them at most `limit`. Outcomes are in the order of `ranks`.
std::vector<RankOutcome> run_ranks(int world_size, const std::vector<int>& ranks,
                                   const std::map<std::string, std::string>& env,
                                   const Scenario& scenario,
                                   std::chrono::milliseconds limit = std::chrono::seconds(60));

// In a child: the gloo backend from the build tree's plugin directory, with
// `options` ("key=value") and the default operation timeout `timeout`;
// `joining`: as a process joining a running world (BackendSettings).
std::unique_ptr<Backend> open_gloo(const std::vector<std::string>& options,
                                   std::chrono::milliseconds timeout, int world_size = -1,
                                   bool joining = false);

}  // namespace tessera::glootest

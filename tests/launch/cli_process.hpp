// Running the built `tessera` binary from a launch test through
// test::ChildProcess: its stdout and stderr are captured, the test can wait
// for a line to appear and send it signals, every wait is bounded, and a
// process still running when the object dies is killed and reaped.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "../support/child_process.hpp"
#include "../support/temp_dir.hpp"

#ifndef TESSERA_CLI
#error "TESSERA_CLI must name the tessera executable"
#endif

namespace tessera::launch_test {

using namespace std::chrono_literals;
using test::eventually;
using test::group_alive;
using test::lines_of;
using test::process_alive;
using test::TempDir;

// How `tessera` ended, with everything it wrote.
struct CliResult {
  int exit_code = -1;  // -1 when killed by a signal or timed out
  int signal = 0;      // the signal that ended it, if any
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Environment changes for the child: `unset` names are removed, then each
// "NAME=VALUE" of `set` replaces or adds a variable. TESSERA_RENDEZVOUS_DIR is
// always removed unless `set` gives it, so the user's environment cannot
// change a test.
struct CliEnv {
  std::vector<std::string> set;
  std::vector<std::string> unset;
};

// An environment change that only sets variables ("NAME=VALUE").
inline CliEnv env_setting(std::vector<std::string> set) { return CliEnv{std::move(set), {}}; }

// The child options of `tessera` run with `env` (output captured).
inline test::ChildOptions cli_options(const CliEnv& env) {
  test::ChildOptions options;
  options.unset = env.unset;
  options.unset.emplace_back("TESSERA_RENDEZVOUS_DIR");
  for (const std::string& entry : env.set) {
    const size_t eq = entry.find('=');
    options.set.emplace_back(entry.substr(0, eq),
                             eq == std::string::npos ? std::string() : entry.substr(eq + 1));
  }
  return options;
}

// The command line `tessera args...`.
inline std::vector<std::string> cli_command(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {TESSERA_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// One running `tessera` process started with `args`.
class CliProcess : public test::ChildProcess {
 public:
  explicit CliProcess(const std::vector<std::string>& args, const CliEnv& env = {})
      : test::ChildProcess(cli_command(args), cli_options(env)) {}

  // Waits for the process to end, collecting output; after `timeout` it is
  // killed with SIGKILL and the result says timed_out.
  CliResult finish(std::chrono::milliseconds timeout) {
    const test::ChildExit e = wait(timeout);
    return CliResult{e.code, e.signal, e.timed_out, out(), err()};
  }
};

// Runs `tessera args...` to completion (SIGKILL after `timeout`).
inline CliResult run_cli(const std::vector<std::string>& args, const CliEnv& env = {},
                         std::chrono::milliseconds timeout = 20s) {
  CliProcess process(args, env);
  return process.finish(timeout);
}

}  // namespace tessera::launch_test

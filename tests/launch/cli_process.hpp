// Running the built `tessera` binary from a test, with a bounded wait: its
// stdout and stderr are collected, the test can wait for a line to appear
// and send it signals, and a process still running when the object dies is
// killed and reaped.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::launch_test {

using namespace std::chrono_literals;

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

// One running `tessera` process started with `args` (argv[0] is added).
class CliProcess {
 public:
  CliProcess(const std::vector<std::string>& args, const CliEnv& env = {});
  CliProcess(const CliProcess&) = delete;
  CliProcess& operator=(const CliProcess&) = delete;
  ~CliProcess();

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  // Collects output until `done(out, err)` holds or `timeout` passes; returns
  // whether it held. Returns false as well if the process ends first without
  // the condition holding.
  bool wait_for_output(const std::function<bool(const std::string&, const std::string&)>& done,
                       std::chrono::milliseconds timeout);

  // Sends `signal` to the process.
  void signal(int signal) const;

  // Waits for the process to end, collecting output; after `timeout` it is
  // killed with SIGKILL and the result says timed_out.
  CliResult finish(std::chrono::milliseconds timeout);

 private:
  // One round of poll + read; returns false when both streams are closed.
  bool pump(std::chrono::milliseconds wait);

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool reaped_ = false;
  CliResult result_;
};

// Runs `tessera args...` to completion (SIGKILL after `timeout`).
CliResult run_cli(const std::vector<std::string>& args, const CliEnv& env = {},
                  std::chrono::milliseconds timeout = 20s);

// Lines of `text` (without newlines); a missing final newline still ends a
// line.
std::vector<std::string> lines_of(const std::string& text);

// True while a process of process group `pgid` exists and is not a zombie
// (read from /proc).
bool group_alive(pid_t pgid);

// True while process `pid` exists and is not a zombie.
bool process_alive(pid_t pid);

// Polls `alive` until it returns false or `timeout` passes; returns whether
// it became false.
bool wait_until_gone(const std::function<bool()>& alive, std::chrono::milliseconds timeout);

// A fresh private directory removed with its contents at destruction.
class TempDir {
 public:
  TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace tessera::launch_test

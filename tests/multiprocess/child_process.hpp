// Starting and watching whole process trees from a test: a launcher (mpirun,
// `tessera launch`) and the ranks it starts. Every child runs in its own
// process group, so a test that gives up kills everything it started.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::mptest {

// How a child ended.
struct ChildExit {
  bool timed_out = false;                // the limit passed; the process group was killed
  int code = -1;                         // exit status when it exited normally, else -1
  int signal = 0;                        // the signal that killed it, else 0
  std::chrono::milliseconds elapsed{0};  // from start to exit (or to the kill)
  [[nodiscard]] bool ok() const noexcept { return !timed_out && signal == 0 && code == 0; }
  [[nodiscard]] std::string describe() const;  // "exited 1", "killed by signal 9", ...
};

// A running command. stdout and stderr both go to `log` (created or
// truncated). `env` entries are added to this process's environment.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv,
               const std::vector<std::pair<std::string, std::string>>& env,
               const std::filesystem::path& log);
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills the process group if it still runs, then reaps it.
  ~ChildProcess();

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  // True while the child has not been reaped and has not exited.
  bool running();
  // Waits at most `limit`; past it the whole process group gets SIGKILL and
  // the result says timed_out. Callable once.
  ChildExit wait(std::chrono::milliseconds limit);

 private:
  pid_t pid_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::optional<ChildExit> exit_;
  void record(int status);
};

// The pids of live processes whose environment holds every key=value of
// `match` (read from /proc/<pid>/environ).
std::vector<pid_t> processes_with_env(
    const std::vector<std::pair<std::string, std::string>>& match);

// The whole content of a text file ("" when it does not exist).
std::string read_text(const std::filesystem::path& path);

// Polls `pred` every 50 ms until it returns true or `limit` passes.
template <typename Pred>
bool eventually(std::chrono::milliseconds limit, Pred&& pred);

// A fresh directory under the system temp dir, removed with its contents by
// the destructor.
class TempDir {
 public:
  explicit TempDir(std::string_view tag);
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace tessera::mptest

#include <thread>

template <typename Pred>
bool tessera::mptest::eventually(std::chrono::milliseconds limit, Pred&& pred) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

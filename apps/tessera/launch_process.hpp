// Starting a child process and waiting for it: the one way the `tessera`
// command starts programs, used for the ranks of `tessera launch` and for
// the per-strategy runs of `tessera bench strategies`; plus the words used
// for how a child ended.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tessera::cli {

// What to run. Each of stdout and stderr goes to its file when one is
// named, else to a pipe when `capture_output` is set, else is inherited.
struct SpawnRequest {
  int rank = 0;       // names the child in error messages ("rank 3") when `label` is empty
  std::string label;  // names the child in error messages; empty: "rank <rank>"
  std::vector<std::string> command;  // argv; command[0] is looked up on PATH (execvp rules)
  // Complete "NAME=VALUE" list for the child; nullopt: this process's own.
  std::optional<std::vector<std::string>> environment;
  bool capture_output = true;         // streams without a file: pipes (true) or inherited
  std::filesystem::path stdout_file;  // non-empty: stdout is this file, created or truncated
  std::filesystem::path stderr_file;  // non-empty: stderr is this file, created or truncated
  bool new_process_group = true;      // the child leads its own process group
};

// A started child. With `new_process_group` it leads its own process group
// (pgid == pid), so a signal sent with signal_group() reaches everything it
// started. Its stdin is /dev/null; it gets SIGKILL when this process dies
// (PR_SET_PDEATHSIG).
struct SpawnedRank {
  pid_t pid = -1;
  int stdout_fd = -1;  // read ends (non-blocking, close-on-exec); -1 when not piped
  int stderr_fd = -1;
};

// Forks and execs `request.command`. Returns once the exec has succeeded;
// the caller reaps the child (wait_child, or its own waitpid). Throws
// tessera::Error naming the child (see `label`) and the command if it
// cannot be executed (not found on PATH, not executable, ...), if an output
// file cannot be created, or if fork/pipe fail; in that case no child is
// left running or unreaped and no descriptor is left open.
SpawnedRank spawn_rank(const SpawnRequest& request);

// How a reaped child ended.
struct ChildExit {
  int wait_status = 0;      // as from waitpid; read it with the functions below
  int64_t max_rss_kib = 0;  // the child's peak resident set size (ru_maxrss), KiB
};

// Waits until the child `pid` ends (retrying when interrupted by a signal),
// reaps it and returns its wait status and peak memory (wait4). The peak
// includes what the child's image held before exec, i.e. at least the
// resident memory of this process when it forked. Throws tessera::Error
// (internal) naming the pid when it is not an unreaped child of this process.
ChildExit wait_child(pid_t pid);

// Sends `signal` to the process group led by `pid` (falls back to the pid
// itself when the group is gone). Errors such as ESRCH are ignored: the
// rank has already ended.
void signal_group(pid_t pid, int signal) noexcept;

// "SIGKILL" for 9; "signal N" when the number has no name.
std::string signal_name(int signal);

// How a child ended, from its waitpid status: "exited with status 3",
// "was killed by signal 9 (SIGKILL)" (plus " (core dumped)" when it did).
std::string describe_exit(int wait_status);

// Short form for the one-line summary: "exit 0", "exit 3", "SIGKILL".
std::string short_exit(int wait_status);

// True when the wait status is a normal exit with status 0.
bool exited_cleanly(int wait_status) noexcept;

}  // namespace tessera::cli

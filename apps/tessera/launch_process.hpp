// Starting one rank of `tessera launch` as a child process, and the words
// used for how it ended.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace tessera::cli {

// What to run for one rank.
struct SpawnRequest {
  int rank = 0;                          // for error messages only
  std::vector<std::string> command;      // argv; command[0] is looked up on PATH (execvp rules)
  std::vector<std::string> environment;  // complete "NAME=VALUE" list for the child
  bool capture_output = true;            // true: stdout/stderr go to pipes; false: inherited
};

// A started rank. The child leads its own process group (pgid == pid), so a
// signal sent with signal_group() reaches everything it started. Its stdin is
// /dev/null; it gets SIGKILL when the launcher dies (PR_SET_PDEATHSIG).
struct SpawnedRank {
  pid_t pid = -1;
  int stdout_fd = -1;  // read ends (non-blocking, close-on-exec); -1 when not captured
  int stderr_fd = -1;
};

// Forks and execs `request.command`. Returns once the exec has succeeded.
// Throws tessera::Error naming the rank and the command if it cannot be
// executed (not found on PATH, not executable, ...) or if fork/pipe fail;
// in that case the child has already been reaped and no descriptor is left
// open.
SpawnedRank spawn_rank(const SpawnRequest& request);

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

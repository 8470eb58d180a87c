// `tessera bench strategies`: runs one command as a child process with its
// output in files and measures the child's peak resident memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::cli {

// How a child process ended.
struct ChildOutcome {
  int wait_status = 0;      // as from waitpid
  int64_t max_rss_kib = 0;  // ru_maxrss of the child (wait4), KiB
  double wall_seconds = 0;  // from start to exit

  // True when the child exited with status 0.
  [[nodiscard]] bool ok() const noexcept;
  // "exited with status 1", "was killed by signal 9 (SIGKILL)" (describe_exit).
  [[nodiscard]] std::string describe() const;
};

// Starts `argv` (argv[0] is looked up on PATH when it has no '/') in this
// process's group and environment, stdin from /dev/null, stdout and stderr
// written to the two files (created or truncated), waits for it and returns
// how it ended and its peak resident set size. The child is killed if this
// process dies first (PR_SET_PDEATHSIG). The peak includes what the child's
// image held before exec, i.e. at least the resident memory of this process
// when it forked. Throws tessera::Error when argv is empty, the command
// cannot be executed, a file cannot be created, or fork/wait fail.
ChildOutcome run_child(const std::vector<std::string>& argv,
                       const std::filesystem::path& stdout_file,
                       const std::filesystem::path& stderr_file);

// The last `max_lines` lines of a text file (at most its last 64 KiB), each
// ending with '\n'; empty when the file is missing or empty.
std::string file_tail(const std::filesystem::path& file, int max_lines);

// This process's own peak resident set size so far (getrusage), KiB.
int64_t self_max_rss_kib();

}  // namespace tessera::cli

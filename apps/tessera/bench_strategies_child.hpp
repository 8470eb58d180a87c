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
  int exit_status = -1;     // exit code; -1 when killed by a signal
  int signal = 0;           // the signal that killed it; 0 when it exited
  int64_t max_rss_kib = 0;  // ru_maxrss of the child (wait4), KiB
  double wall_seconds = 0;  // from start to exit

  [[nodiscard]] bool ok() const noexcept { return exit_status == 0 && signal == 0; }
  // "exit status 1", "killed by signal 9 (SIGKILL)".
  [[nodiscard]] std::string describe() const;
};

// Starts `argv[0]` (a path, not searched on PATH) with `argv`, stdin from
// /dev/null, stdout and stderr written to the two files (created or
// truncated), waits for it with wait4() and returns how it ended and its
// peak resident set size. The child is killed if this process dies first
// (PR_SET_PDEATHSIG). The peak includes what the child's image held before
// exec, i.e. at least the resident memory of this process when it forked.
// Throws tessera::Error (internal) when argv is empty, a file cannot be
// opened, or fork/wait fail; a command that cannot be executed makes the
// child exit with status 127 and say why on its stderr file.
ChildOutcome run_child(const std::vector<std::string>& argv,
                       const std::filesystem::path& stdout_file,
                       const std::filesystem::path& stderr_file);

// The last `max_lines` lines of a text file (at most its last 64 KiB), each
// ending with '\n'; empty when the file is missing or empty.
std::string file_tail(const std::filesystem::path& file, int max_lines);

// This process's own peak resident set size so far (getrusage), KiB.
int64_t self_max_rss_kib();

}  // namespace tessera::cli

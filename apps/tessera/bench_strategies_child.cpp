#include "bench_strategies_child.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <sstream>

#include "launch_process.hpp"
#include "tessera/core/input_file.hpp"

namespace tessera::cli {

bool ChildOutcome::ok() const noexcept { return exited_cleanly(wait_status); }

std::string ChildOutcome::describe() const { return describe_exit(wait_status); }

ChildOutcome run_child(const std::vector<std::string>& argv,
                       const std::filesystem::path& stdout_file,
                       const std::filesystem::path& stderr_file) {
  SpawnRequest request;
  request.label = "a child process";
  request.command = argv;
  request.capture_output = false;
  request.stdout_file = stdout_file;
  request.stderr_file = stderr_file;
  request.new_process_group = false;  // a Ctrl-C at the terminal reaches it too

  const auto started = std::chrono::steady_clock::now();
  const ChildExit ended = wait_child(spawn_rank(request).pid);
  ChildOutcome outcome;
  outcome.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  outcome.wait_status = ended.wait_status;
  outcome.max_rss_kib = ended.max_rss_kib;
  return outcome;
}

std::string file_tail(const std::filesystem::path& file, int max_lines) {
  constexpr uint64_t kMaxBytes = uint64_t{64} * 1024;
  uint64_t size = 0;
  std::string problem;
  const int fd = open_regular_file(file, size, problem);
  if (fd < 0) return {};
  const uint64_t from = size > kMaxBytes ? size - kMaxBytes : 0;
  std::string text(static_cast<size_t>(size - from), '\0');
  const ssize_t n =
      max_lines > 0 ? ::pread(fd, text.data(), text.size(), static_cast<off_t>(from)) : 0;
  ::close(fd);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  std::istringstream in(text);
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(std::move(line));
    if (lines.size() > static_cast<size_t>(max_lines)) lines.pop_front();
  }
  std::string tail;
  for (const auto& l : lines) tail += l + '\n';
  return tail;
}

int64_t self_max_rss_kib() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return usage.ru_maxrss;
}

}  // namespace tessera::cli

#include "bench_strategies_child.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <fstream>

#include "launch_process.hpp"

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
  constexpr std::streamoff kMaxBytes = std::streamoff{64} * 1024;
  std::ifstream in(file, std::ios::binary);
  if (!in || max_lines <= 0) return {};
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(std::max<std::streamoff>(0, size - kMaxBytes));
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(std::move(line));
    if (lines.size() > static_cast<size_t>(max_lines)) lines.pop_front();
  }
  std::string text;
  for (const auto& l : lines) text += l + '\n';
  return text;
}

int64_t self_max_rss_kib() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return usage.ru_maxrss;
}

}  // namespace tessera::cli

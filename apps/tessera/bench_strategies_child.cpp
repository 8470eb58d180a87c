#include "bench_strategies_child.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>

#include <fmt/format.h>

#include "tessera/sdk/error.hpp"

namespace tessera::cli {
namespace {

[[noreturn]] void fail(const std::string& message) { throw Error(TESSERA_ERR_INTERNAL, message); }

// An open descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

int open_output(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    fail(fmt::format("cannot create '{}' for a child's output: {}", file.string(),
                     std::strerror(errno)));
  }
  return fd;
}

// Between fork and exec: async-signal-safe calls only. Never returns.
[[noreturn]] void exec_child(char* const* argv, pid_t parent, int in_fd, int out_fd, int err_fd,
                             const std::string& exec_error) {
  ::signal(SIGPIPE, SIG_DFL);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) _exit(127);
  if (::dup2(in_fd, STDIN_FILENO) < 0 || ::dup2(out_fd, STDOUT_FILENO) < 0 ||
      ::dup2(err_fd, STDERR_FILENO) < 0) {
    _exit(127);
  }
  ::execv(argv[0], argv);
  ssize_t ignored = ::write(STDERR_FILENO, exec_error.data(), exec_error.size());
  (void)ignored;
  _exit(127);
}

}  // namespace

std::string ChildOutcome::describe() const {
  if (signal != 0) {
    const char* abbrev = ::sigabbrev_np(signal);
    return fmt::format("killed by signal {} (SIG{})", signal, abbrev == nullptr ? "?" : abbrev);
  }
  return fmt::format("exit status {}", exit_status);
}

ChildOutcome run_child(const std::vector<std::string>& argv,
                       const std::filesystem::path& stdout_file,
                       const std::filesystem::path& stderr_file) {
  if (argv.empty()) fail("run_child: empty command");
  // Everything the child touches is prepared before fork.
  std::vector<std::string> args = argv;
  std::vector<char*> pointers;
  pointers.reserve(args.size() + 1);
  for (auto& arg : args) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  const std::string exec_error = "cannot execute '" + args.front() + "'\n";

  const Fd in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) fail(fmt::format("cannot open /dev/null: {}", std::strerror(errno)));
  const Fd out(open_output(stdout_file));
  const Fd err(open_output(stderr_file));

  const pid_t parent = ::getpid();
  const auto started = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(pointers.data(), parent, in.get(), out.get(), err.get(), exec_error);
  if (pid < 0)
    fail(fmt::format("cannot start '{}': fork failed: {}", args.front(), std::strerror(errno)));

  int status = 0;
  rusage usage{};
  pid_t got = -1;
  do {
    got = ::wait4(pid, &status, 0, &usage);
  } while (got < 0 && errno == EINTR);
  if (got != pid) {
    fail(fmt::format("waiting for '{}' (pid {}) failed: {}", args.front(), pid,
                     std::strerror(errno)));
  }
  ChildOutcome outcome;
  outcome.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  outcome.max_rss_kib = usage.ru_maxrss;
  if (WIFEXITED(status)) {
    outcome.exit_status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    outcome.signal = WTERMSIG(status);
  }
  return outcome;
}

std::string file_tail(const std::filesystem::path& file, int max_lines) {
  constexpr std::streamoff kMaxBytes = 64 * 1024;
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

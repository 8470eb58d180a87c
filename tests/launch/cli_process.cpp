#include "cli_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace tessera::launch_test {
namespace {

using Clock = std::chrono::steady_clock;

std::string name_of(const std::string& entry) { return entry.substr(0, entry.find('=')); }

std::vector<std::string> child_environment(const CliEnv& env) {
  std::vector<std::string> removed = env.unset;
  removed.emplace_back("TESSERA_RENDEZVOUS_DIR");
  for (const std::string& entry : env.set) removed.push_back(name_of(entry));
  std::vector<std::string> result;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    bool drop = false;
    for (const std::string& name : removed) drop = drop || name_of(text) == name;
    if (!drop) result.push_back(text);
  }
  result.insert(result.end(), env.set.begin(), env.set.end());
  return result;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Process state letter and process group from /proc/<pid>/stat; false when
// the process does not exist.
bool read_stat(pid_t pid, char& state, pid_t& pgid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return false;
  const std::size_t close = text.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 1));
  pid_t ppid = 0;
  rest >> state >> ppid >> pgid;
  return static_cast<bool>(rest);
}

}  // namespace

CliProcess::CliProcess(const std::vector<std::string>& args, const CliEnv& env) {
  std::vector<std::string> argv_strings = {TESSERA_CLI};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<std::string> env_strings = child_environment(env);
  std::vector<char*> argv = c_strings(argv_strings);
  std::vector<char*> envp = c_strings(env_strings);
  std::array<int, 2> out{};
  std::array<int, 2> err{};
  if (::pipe2(out.data(), O_CLOEXEC) != 0 || ::pipe2(err.data(), O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe2");
  }
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    _exit(126);
  }
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  if (pid_ < 0) throw std::system_error(errno, std::generic_category(), "fork");
}

CliProcess::~CliProcess() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

bool CliProcess::pump(std::chrono::milliseconds wait) {
  std::array<pollfd, 2> fds{{{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}}};
  if (out_fd_ < 0 && err_fd_ < 0) return false;
  ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
  std::array<char, 65536> buffer{};
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].fd < 0 || fds[i].revents == 0) continue;
    const ssize_t n = ::read(fds[i].fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    int& fd = i == 0 ? out_fd_ : err_fd_;
    if (n <= 0) {
      ::close(fd);
      fd = -1;
      continue;
    }
    (i == 0 ? result_.out : result_.err).append(buffer.data(), static_cast<std::size_t>(n));
  }
  return out_fd_ >= 0 || err_fd_ >= 0;
}

bool CliProcess::wait_for_output(
    const std::function<bool(const std::string&, const std::string&)>& done,
    std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done(result_.out, result_.err)) {
    if (Clock::now() >= deadline || !pump(20ms)) return done(result_.out, result_.err);
  }
  return true;
}

void CliProcess::signal(int signal) const { ::kill(pid_, signal); }

CliResult CliProcess::finish(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::optional<Clock::time_point> reaped_at;
  for (;;) {
    if (!reaped_) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        reaped_at = Clock::now();
        if (WIFEXITED(status)) result_.exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) result_.signal = WTERMSIG(status);
      } else if (Clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        int ignored = 0;
        ::waitpid(pid_, &ignored, 0);
        reaped_ = true;
        reaped_at = Clock::now();
        result_.timed_out = true;
      }
    }
    const bool open = out_fd_ >= 0 || err_fd_ >= 0;
    // Output still held open by a leftover grandchild is not waited for long.
    if (reaped_ && (!open || Clock::now() - *reaped_at > 2s)) break;
    pump(20ms);
  }
  return result_;
}

CliResult run_cli(const std::vector<std::string>& args, const CliEnv& env,
                  std::chrono::milliseconds timeout) {
  CliProcess process(args, env);
  return process.finish(timeout);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

bool process_alive(pid_t pid) {
  char state = 0;
  pid_t pgid = 0;
  return read_stat(pid, state, pgid) && state != 'Z' && state != 'X';
}

bool group_alive(pid_t pgid) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    char state = 0;
    pid_t group = 0;
    if (read_stat(static_cast<pid_t>(std::stol(name)), state, group) && group == pgid &&
        state != 'Z' && state != 'X') {
      return true;
    }
  }
  return false;
}

bool wait_until_gone(const std::function<bool()>& alive, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (alive()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe)
  std::string pattern = (std::filesystem::path(base != nullptr && *base != '\0' ? base : "/tmp") /
                         "tessera-launch-test-XXXXXX")
                            .string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace tessera::launch_test

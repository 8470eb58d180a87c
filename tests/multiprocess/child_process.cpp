#include "child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace tessera::mptest {

std::string ChildExit::describe() const {
  if (timed_out) return "did not finish in time (killed)";
  if (signal != 0) return "killed by signal " + std::to_string(signal);
  return "exited " + std::to_string(code);
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::vector<std::pair<std::string, std::string>>& env,
                           const std::filesystem::path& log) {
  if (argv.empty()) throw std::invalid_argument("ChildProcess: empty command");
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error("cannot create " + log.string() + ": " + std::strerror(errno));
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));  // NOLINT
  args.push_back(nullptr);
  start_ = std::chrono::steady_clock::now();
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(fd);
    throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid_ == 0) {
    // Child: own process group, output to the log, extra environment.
    ::setpgid(0, 0);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
    ::execvp(args[0], args.data());
    const std::string msg = "exec " + argv[0] + " failed: " + std::strerror(errno) + "\n";
    (void)!::write(STDERR_FILENO, msg.data(), msg.size());
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);  // also from the parent, so kill(-pid) works at once
  ::close(fd);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exit_) {
    ::kill(-pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

void ChildProcess::record(int status) {
  ChildExit e;
  e.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start_);
  if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  exit_ = e;
  // Whatever the launcher left behind in its group goes too.
  ::kill(-pid_, SIGKILL);
}

bool ChildProcess::running() {
  if (exit_) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    record(status);
    return false;
  }
  return true;
}

ChildExit ChildProcess::wait(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      record(status);
      exit_->timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return *exit_;
}

std::vector<pid_t> processes_with_env(
    const std::vector<std::pair<std::string, std::string>>& match) {
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string all = read_text(entry.path() / "environ");
    if (all.empty()) continue;
    size_t matched = 0;
    for (const auto& [key, value] : match) {
      const std::string needle = key + "=" + value;
      size_t pos = 0;
      while (pos < all.size()) {
        const size_t end = all.find('\0', pos);
        const size_t stop = end == std::string::npos ? all.size() : end;
        if (all.compare(pos, stop - pos, needle) == 0) {
          ++matched;
          break;
        }
        pos = stop + 1;
      }
    }
    if (matched == match.size()) found.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return found;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string text;
  char chunk[4096];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
  }
  return text;
}

TempDir::TempDir(std::string_view tag) {
  std::string pattern =
      (std::filesystem::temp_directory_path() / ("tessera-" + std::string(tag) + "-XXXXXX"))
          .string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace tessera::mptest

// Child processes of a test: a command (a launcher, the built `tessera`) or
// a function run in a forked copy of the test, with environment changes, its
// output captured or written to a file, a bounded wait that kills it when the
// limit passes, and its exit status. A child still running when the object
// dies is killed and reaped, so a test never hangs on one and never leaves
// one behind. Also the /proc queries the tests make about the processes a
// child started, and polling with a limit.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>  // setenv, unsetenv
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace tessera::test {

// Where a child's stdout and stderr go.
enum class ChildOutput {
  kCapture,  // pipes, read into out() and err() while the test waits
  kFile,     // both to ChildOptions::log (created or truncated)
  kInherit,  // the test's own stdout and stderr
};

// How a child is started.
struct ChildOptions {
  // Environment changes: the `unset` names are removed, then each
  // (name, value) of `set` replaces or adds a variable.
  std::vector<std::pair<std::string, std::string>> set;
  std::vector<std::string> unset;
  ChildOutput output = ChildOutput::kCapture;
  std::filesystem::path log;  // for ChildOutput::kFile
  // Starts the child in a process group of its own: a kill (the limit, the
  // destructor) goes to the whole group, and once the child has exited
  // whatever it left running in its group is killed too.
  bool own_group = false;
};

// How a child ended.
struct ChildExit {
  bool timed_out = false;                // the limit passed and it was killed
  int code = -1;                         // exit status when it exited normally, else -1
  int signal = 0;                        // the signal that ended it, else 0
  std::chrono::milliseconds elapsed{0};  // from start to exit (or to the kill)
  [[nodiscard]] bool ok() const noexcept { return !timed_out && signal == 0 && code == 0; }
  // "exited 1", "killed by signal 9", "did not finish in time (killed)".
  [[nodiscard]] std::string describe() const {
    if (timed_out) return "did not finish in time (killed)";
    if (signal != 0) return "killed by signal " + std::to_string(signal);
    return "exited " + std::to_string(code);
  }
};

class ChildProcess {
 public:
  // Runs `argv` (argv[0] is looked up in PATH unless it holds a '/'). A
  // command that cannot be executed exits 127 with the reason on stderr.
  // Throws std::invalid_argument for an empty command and std::system_error
  // when the output file, a pipe or the fork cannot be made.
  explicit ChildProcess(const std::vector<std::string>& argv, const ChildOptions& options = {}) {
    if (argv.empty()) throw std::invalid_argument("ChildProcess: empty command");
    std::vector<std::string> env = environment(options);
    std::vector<std::string> args = argv;
    std::vector<char*> argp = c_strings(args);
    std::vector<char*> envp = c_strings(env);
    start(options, [&] {
      ::execvpe(argp[0], argp.data(), envp.data());
      const std::string msg = "exec " + argv[0] + " failed: " + std::strerror(errno) + "\n";
      (void)!::write(STDERR_FILENO, msg.data(), msg.size());
      return 127;
    });
  }
  // Runs body() in a forked copy of this process, after the environment
  // changes; its return value is the exit status (an exception escaping it
  // is written to stderr and exits 1). Same failures as above.
  explicit ChildProcess(const std::function<int()>& body, const ChildOptions& options = {}) {
    start(options, [&] {
      // NOLINTBEGIN(concurrency-mt-unsafe): the child has one thread
      for (const std::string& name : options.unset) ::unsetenv(name.c_str());
      for (const auto& [name, value] : options.set) ::setenv(name.c_str(), value.c_str(), 1);
      // NOLINTEND(concurrency-mt-unsafe)
      int code = 1;
      try {
        code = body();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "uncaught exception: %s\n", e.what());
      }
      std::fflush(nullptr);
      return code;
    });
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills the child (its group with own_group) if it still runs, then reaps it.
  ~ChildProcess() {
    if (pid_ > 0 && !exit_) {
      kill_now();
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    close_fd(out_fd_);
    close_fd(err_fd_);
  }

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  // What the child wrote so far (ChildOutput::kCapture).
  [[nodiscard]] const std::string& out() const noexcept { return out_; }
  [[nodiscard]] const std::string& err() const noexcept { return err_; }

  // True while the child has not exited (reaps it when it has).
  bool running() {
    if (exit_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      record(status);
      return false;
    }
    return true;
  }

  // Sends `sig` to the child process.
  void signal(int sig) const { ::kill(pid_, sig); }

  // Reads captured output until `done(out, err)` holds or `limit` passes;
  // returns whether it held. Returns false as well when the output ends
  // first without the condition holding.
  bool wait_for_output(const std::function<bool(const std::string&, const std::string&)>& done,
                       std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (!done(out_, err_)) {
      if (Clock::now() >= deadline || !pump(std::chrono::milliseconds(20))) {
        return done(out_, err_);
      }
    }
    return true;
  }

  // Waits for the child to exit, at most `limit`, reading captured output;
  // past the limit it is killed with SIGKILL (its group with own_group) and
  // the result says timed_out. Captured output still held open by a process
  // the child left behind is read for at most 2 s more. Callable again: it
  // then returns the same result.
  ChildExit wait(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (running()) {
      if (Clock::now() >= deadline) {
        kill_now();
        int status = 0;
        ::waitpid(pid_, &status, 0);
        record(status);
        exit_->timed_out = true;
        exit_->code = -1;
        exit_->signal = 0;
        break;
      }
      if (!pump(std::chrono::milliseconds(20))) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    const auto reaped = Clock::now();
    while (Clock::now() - reaped < std::chrono::seconds(2) && pump(std::chrono::milliseconds(20))) {
    }
    return *exit_;
  }

 private:
  using Clock = std::chrono::steady_clock;

  static std::string name_of(const std::string& entry) { return entry.substr(0, entry.find('=')); }

  // This process's environment with the changes of `options`.
  static std::vector<std::string> environment(const ChildOptions& options) {
    std::vector<std::string> removed = options.unset;
    for (const auto& [name, value] : options.set) removed.push_back(name);
    std::vector<std::string> result;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string text(*entry);
      bool drop = false;
      for (const std::string& name : removed) drop = drop || name_of(text) == name;
      if (!drop) result.push_back(text);
    }
    for (const auto& [name, value] : options.set) result.push_back(name + "=" + value);
    return result;
  }

  static std::vector<char*> c_strings(std::vector<std::string>& strings) {
    std::vector<char*> pointers;
    pointers.reserve(strings.size() + 1);
    for (std::string& s : strings) pointers.push_back(s.data());
    pointers.push_back(nullptr);
    return pointers;
  }

  static void close_fd(int& fd) noexcept {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  // Forks; the child sets up its group and output and returns child_main()
  // as its exit status.
  template <typename Main>
  void start(const ChildOptions& options, Main&& child_main) {
    own_group_ = options.own_group;
    int log_fd = -1;
    std::array<int, 2> out{-1, -1};
    std::array<int, 2> err{-1, -1};
    if (options.output == ChildOutput::kFile) {
      log_fd = ::open(options.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (log_fd < 0) {
        throw std::system_error(errno, std::generic_category(), "create " + options.log.string());
      }
    } else if (options.output == ChildOutput::kCapture) {
      if (::pipe2(out.data(), O_CLOEXEC) != 0 || ::pipe2(err.data(), O_CLOEXEC) != 0) {
        const int e = errno;
        for (int fd : {out[0], out[1], err[0], err[1]}) {
          if (fd >= 0) ::close(fd);
        }
        throw std::system_error(e, std::generic_category(), "pipe2");
      }
    }
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      if (own_group_) ::setpgid(0, 0);
      if (log_fd >= 0) {
        ::dup2(log_fd, STDOUT_FILENO);
        ::dup2(log_fd, STDERR_FILENO);
      } else if (out[1] >= 0) {
        ::dup2(out[1], STDOUT_FILENO);
        ::dup2(err[1], STDERR_FILENO);
      }
      ::_exit(child_main());
    }
    const int fork_errno = errno;
    if (log_fd >= 0) ::close(log_fd);
    if (out[1] >= 0) ::close(out[1]);
    if (err[1] >= 0) ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    if (pid_ < 0) throw std::system_error(fork_errno, std::generic_category(), "fork");
    // Also from the parent, so that a kill of the group works at once.
    if (own_group_) ::setpgid(pid_, pid_);
  }

  void kill_now() const { ::kill(own_group_ ? -pid_ : pid_, SIGKILL); }

  void record(int status) {
    ChildExit e;
    e.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
    if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
    exit_ = e;
    // Whatever the child left behind in its group goes too.
    if (own_group_) ::kill(-pid_, SIGKILL);
  }

  // One round of poll and read of the captured output; false when both
  // streams are closed (or not captured).
  bool pump(std::chrono::milliseconds wait) {
    if (out_fd_ < 0 && err_fd_ < 0) return false;
    std::array<pollfd, 2> fds{{{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}}};
    ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
    std::array<char, 65536> buffer{};
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      int& fd = i == 0 ? out_fd_ : err_fd_;
      if (n <= 0) {
        close_fd(fd);
        continue;
      }
      (i == 0 ? out_ : err_).append(buffer.data(), static_cast<size_t>(n));
    }
    return out_fd_ >= 0 || err_fd_ >= 0;
  }

  pid_t pid_ = -1;
  bool own_group_ = false;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_;
  std::string err_;
  Clock::time_point start_;
  std::optional<ChildExit> exit_;
};

// Polls `pred` every 20 ms until it returns true or `limit` passes; returns
// whether it did.
template <typename Pred>
bool eventually(std::chrono::milliseconds limit, Pred&& pred) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

namespace child_detail {

// Process state letter and process group from /proc/<pid>/stat; false when
// the process does not exist.
inline bool read_stat(pid_t pid, char& state, pid_t& pgid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return false;
  const size_t close = text.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 1));
  pid_t ppid = 0;
  rest >> state >> ppid >> pgid;
  return static_cast<bool>(rest);
}

// Calls fn(pid) for every process in /proc.
template <typename Fn>
void for_each_pid(Fn&& fn) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    fn(static_cast<pid_t>(std::stol(name)));
  }
}

}  // namespace child_detail

// The whole content of a text file ("" when it does not exist).
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Lines of `text` (without newlines); a missing final newline still ends a
// line.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// True while process `pid` exists and is not a zombie.
inline bool process_alive(pid_t pid) {
  char state = 0;
  pid_t pgid = 0;
  return child_detail::read_stat(pid, state, pgid) && state != 'Z' && state != 'X';
}

// True while a process of process group `pgid` exists and is not a zombie.
inline bool group_alive(pid_t pgid) {
  bool alive = false;
  child_detail::for_each_pid([&](pid_t pid) {
    char state = 0;
    pid_t group = 0;
    if (!alive && child_detail::read_stat(pid, state, group) && group == pgid && state != 'Z' &&
        state != 'X') {
      alive = true;
    }
  });
  return alive;
}

// The pids of live processes whose environment holds every key=value of
// `match` (read from /proc/<pid>/environ).
inline std::vector<pid_t> processes_with_env(
    const std::vector<std::pair<std::string, std::string>>& match) {
  std::vector<pid_t> found;
  child_detail::for_each_pid([&](pid_t pid) {
    const std::string all = read_text("/proc/" + std::to_string(pid) + "/environ");
    if (all.empty()) return;
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
    if (matched == match.size()) found.push_back(pid);
  });
  return found;
}

}  // namespace tessera::test

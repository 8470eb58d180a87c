#include "launch_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "tessera/sdk/error.hpp"

namespace tessera::cli {
namespace {

// A pipe whose ends close themselves unless released.
struct Pipe {
  std::array<int, 2> fd{-1, -1};
  Pipe() = default;
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  ~Pipe() {
    for (int& end : fd) close_end(end);
  }
  static void close_end(int& end) noexcept {
    if (end >= 0) ::close(end);
    end = -1;
  }
  void open(int rank, const char* what) {
    if (::pipe2(fd.data(), O_CLOEXEC) != 0) {
      throw Error(TESSERA_ERR_INTERNAL, fmt::format("cannot start rank {}: cannot create the {} "
                                                    "pipe: {}",
                                                    rank, what, std::strerror(errno)));
    }
  }
  int release_read() noexcept {
    const int end = fd[0];
    fd[0] = -1;
    return end;
  }
};

// Makes `fd` the child's descriptor `target`, open across exec. Returns
// false (errno set) on failure. Async-signal-safe.
bool install_fd(int fd, int target) noexcept {
  if (fd == target) return ::fcntl(fd, F_SETFD, 0) == 0;  // already there: keep it open
  return ::dup2(fd, target) >= 0;
}

// Runs in the child between fork and exec: only async-signal-safe calls.
// Never returns; on failure the errno goes to `status_fd` and the child
// exits with 127.
[[noreturn]] void exec_child(char* const* argv, char* const* envp, pid_t launcher, int out_fd,
                             int err_fd, int status_fd, const sigset_t& original_mask) {
  for (const int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE}) ::signal(sig, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &original_mask, nullptr);
  ::setpgid(0, 0);
  int error = 0;
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) error = errno;
  if (error == 0 && ::getppid() != launcher) _exit(127);          // the launcher is already gone
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // dup2 keeps only fd 0
  if (error == 0 && null_fd < 0) error = errno;
  if (error == 0 && !install_fd(null_fd, STDIN_FILENO)) error = errno;
  if (error == 0 && out_fd >= 0 && !install_fd(out_fd, STDOUT_FILENO)) error = errno;
  if (error == 0 && err_fd >= 0 && !install_fd(err_fd, STDERR_FILENO)) error = errno;
  if (error == 0) {
    ::execvpe(argv[0], argv, envp);
    error = errno;
  }
  ssize_t ignored = ::write(status_fd, &error, sizeof(error));
  (void)ignored;
  _exit(127);
}

std::string exec_failure(const SpawnRequest& request, int error) {
  const std::string& file = request.command.front();
  const bool searched = file.find('/') == std::string::npos;
  if (error == ENOENT && searched) {
    return fmt::format("cannot start rank {}: command '{}' was not found on PATH", request.rank,
                       file);
  }
  if (error == ENOENT) {
    return fmt::format("cannot start rank {}: command '{}' does not exist", request.rank, file);
  }
  return fmt::format("cannot start rank {}: cannot execute '{}': {}", request.rank, file,
                     std::strerror(error));
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const std::string& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

SpawnedRank spawn_rank(const SpawnRequest& request) {
  if (request.command.empty()) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                fmt::format("cannot start rank {}: empty command", request.rank));
  }
  const std::vector<char*> argv = c_strings(request.command);
  const std::vector<char*> envp = c_strings(request.environment);
  Pipe status;
  Pipe out;
  Pipe err;
  status.open(request.rank, "exec status");
  if (request.capture_output) {
    out.open(request.rank, "stdout");
    err.open(request.rank, "stderr");
  }

  // Signals stay blocked across fork so that the launcher's handlers never
  // run in the child before it has reset them.
  sigset_t all;
  sigset_t original;
  ::sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, &original);
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    exec_child(argv.data(), envp.data(), launcher, out.fd[1], err.fd[1], status.fd[1], original);
  }
  const int fork_error = errno;
  ::sigprocmask(SIG_SETMASK, &original, nullptr);
  if (pid < 0) {
    throw Error(TESSERA_ERR_INTERNAL, fmt::format("cannot start rank {}: fork failed: {}",
                                                  request.rank, std::strerror(fork_error)));
  }
  ::setpgid(pid, pid);  // also done by the child; whichever runs first wins
  Pipe::close_end(status.fd[1]);
  Pipe::close_end(out.fd[1]);
  Pipe::close_end(err.fd[1]);

  int exec_error = 0;
  ssize_t got = 0;
  do {
    got = ::read(status.fd[0], &exec_error, sizeof(exec_error));
  } while (got < 0 && errno == EINTR);
  if (got != 0) {
    int wait_status = 0;
    while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
    }
    if (got != static_cast<ssize_t>(sizeof(exec_error))) exec_error = EIO;
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, exec_failure(request, exec_error));
  }

  SpawnedRank spawned;
  spawned.pid = pid;
  if (request.capture_output) {
    spawned.stdout_fd = out.release_read();
    spawned.stderr_fd = err.release_read();
    for (const int fd : {spawned.stdout_fd, spawned.stderr_fd}) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
  }
  return spawned;
}

void signal_group(pid_t pid, int signal) noexcept {
  if (pid <= 0) return;
  if (::kill(-pid, signal) != 0) (void)::kill(pid, signal);
}

std::string signal_name(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  if (abbrev == nullptr) return fmt::format("signal {}", signal);
  return std::string("SIG") + abbrev;
}

std::string describe_exit(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exited with status {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return fmt::format("was killed by signal {} ({}){}", sig, signal_name(sig),
                       WCOREDUMP(wait_status) ? " (core dumped)" : "");
  }
  return fmt::format("ended with wait status {:#x}", wait_status);
}

std::string short_exit(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exit {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return signal_name(WTERMSIG(wait_status));
  return fmt::format("status {:#x}", wait_status);
}

bool exited_cleanly(int wait_status) noexcept {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

}  // namespace tessera::cli

#include "launch_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "tessera/sdk/error.hpp"

namespace tessera::cli {
namespace {

// A descriptor closed on scope exit unless released.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  [[nodiscard]] int get() const noexcept { return fd_; }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Both ends of a pipe (close-on-exec).
struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};

// Opens `pipe` for the child named `who`; throws naming `what` it carries.
void open_pipe(Pipe& pipe, const std::string& who, const char* what) {
  std::array<int, 2> fds{-1, -1};
  if (::pipe2(fds.data(), O_CLOEXEC) != 0) {
    throw Error(TESSERA_ERR_INTERNAL, fmt::format("cannot start {}: cannot create the {} pipe: {}",
                                                  who, what, std::strerror(errno)));
  }
  pipe.read_end.reset(fds[0]);
  pipe.write_end.reset(fds[1]);
}

// Creates or truncates `file` into `fd` for the child's `stream`
// (close-on-exec); throws naming the file and the child `who`.
void open_output(UniqueFd& fd, const std::filesystem::path& file, const std::string& who,
                 const char* stream) {
  fd.reset(::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    throw Error(TESSERA_ERR_INTERNAL,
                fmt::format("cannot start {}: cannot create '{}' for its {}: {}", who,
                            file.string(), stream, std::strerror(errno)));
  }
}

// Makes `fd` the child's descriptor `target`, open across exec. Returns
// false (errno set) on failure. Async-signal-safe.
bool install_fd(int fd, int target) noexcept {
  if (fd == target) return ::fcntl(fd, F_SETFD, 0) == 0;  // already there: keep it open
  return ::dup2(fd, target) >= 0;
}

// What the child does between fork and exec. Descriptors of -1 are left
// as inherited.
struct ChildSetup {
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  pid_t parent = -1;
  int out_fd = -1;
  int err_fd = -1;
  int status_fd = -1;  // gets the errno of a failed setup or exec
  bool new_group = true;
};

// Runs in the child between fork and exec: only async-signal-safe calls.
// Never returns; on failure the errno goes to `status_fd` and the child
// exits with 127.
[[noreturn]] void exec_child(const ChildSetup& setup, const sigset_t& original_mask) {
  for (const int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE}) ::signal(sig, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &original_mask, nullptr);
  if (setup.new_group) ::setpgid(0, 0);
  int error = 0;
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) error = errno;
  if (error == 0 && ::getppid() != setup.parent) _exit(127);      // the parent is already gone
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // dup2 keeps only fd 0
  if (error == 0 && null_fd < 0) error = errno;
  if (error == 0 && !install_fd(null_fd, STDIN_FILENO)) error = errno;
  if (error == 0 && setup.out_fd >= 0 && !install_fd(setup.out_fd, STDOUT_FILENO)) error = errno;
  if (error == 0 && setup.err_fd >= 0 && !install_fd(setup.err_fd, STDERR_FILENO)) error = errno;
  if (error == 0) {
    ::execvpe(setup.argv[0], setup.argv, setup.envp);
    error = errno;
  }
  ssize_t ignored = ::write(setup.status_fd, &error, sizeof(error));
  (void)ignored;
  _exit(127);
}

std::string exec_failure(const SpawnRequest& request, const std::string& who, int error) {
  const std::string& file = request.command.front();
  const bool searched = file.find('/') == std::string::npos;
  if (error == ENOENT && searched) {
    return fmt::format("cannot start {}: command '{}' was not found on PATH", who, file);
  }
  if (error == ENOENT) {
    return fmt::format("cannot start {}: command '{}' does not exist", who, file);
  }
  return fmt::format("cannot start {}: cannot execute '{}': {}", who, file, std::strerror(error));
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const std::string& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

// Where one of the child's output streams goes: its file, a pipe, or
// nowhere new (inherited; both descriptors stay -1).
struct OutputRoute {
  UniqueFd file;
  Pipe pipe;
  [[nodiscard]] int child_end() const noexcept {
    return file.get() >= 0 ? file.get() : pipe.write_end.get();
  }
};

void route_output(OutputRoute& route, const std::filesystem::path& file, bool capture,
                  const std::string& who, const char* stream) {
  if (!file.empty()) {
    open_output(route.file, file, who, stream);
  } else if (capture) {
    open_pipe(route.pipe, who, stream);
  }
}

}  // namespace

SpawnedRank spawn_rank(const SpawnRequest& request) {
  const std::string who =
      request.label.empty() ? fmt::format("rank {}", request.rank) : request.label;
  if (request.command.empty()) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, fmt::format("cannot start {}: empty command", who));
  }
  const std::vector<char*> argv = c_strings(request.command);
  std::vector<char*> envp;
  if (request.environment) envp = c_strings(*request.environment);
  Pipe status;
  OutputRoute out;
  OutputRoute err;
  open_pipe(status, who, "exec status");
  route_output(out, request.stdout_file, request.capture_output, who, "stdout");
  route_output(err, request.stderr_file, request.capture_output, who, "stderr");

  ChildSetup setup;
  setup.argv = argv.data();
  setup.envp = request.environment ? envp.data() : environ;
  setup.parent = ::getpid();
  setup.out_fd = out.child_end();
  setup.err_fd = err.child_end();
  setup.status_fd = status.write_end.get();
  setup.new_group = request.new_process_group;

  // Signals stay blocked across fork so that this process's handlers never
  // run in the child before it has reset them.
  sigset_t all;
  sigset_t original;
  ::sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, &original);
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(setup, original);
  const int fork_error = errno;
  ::sigprocmask(SIG_SETMASK, &original, nullptr);
  if (pid < 0) {
    throw Error(TESSERA_ERR_INTERNAL,
                fmt::format("cannot start {}: fork failed: {}", who, std::strerror(fork_error)));
  }
  if (request.new_process_group) ::setpgid(pid, pid);  // also done by the child; first one wins
  status.write_end.reset();
  for (OutputRoute* route : {&out, &err}) {
    route->file.reset();
    route->pipe.write_end.reset();
  }

  int exec_error = 0;
  ssize_t got = 0;
  do {
    got = ::read(status.read_end.get(), &exec_error, sizeof(exec_error));
  } while (got < 0 && errno == EINTR);
  if (got != 0) {
    int wait_status = 0;
    while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
    }
    if (got != static_cast<ssize_t>(sizeof(exec_error))) exec_error = EIO;
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, exec_failure(request, who, exec_error));
  }

  SpawnedRank spawned;
  spawned.pid = pid;
  spawned.stdout_fd = out.pipe.read_end.release();
  spawned.stderr_fd = err.pipe.read_end.release();
  for (const int fd : {spawned.stdout_fd, spawned.stderr_fd}) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return spawned;
}

ChildExit wait_child(pid_t pid) {
  ChildExit result;
  rusage usage{};
  pid_t got = -1;
  do {
    got = ::wait4(pid, &result.wait_status, 0, &usage);
  } while (got < 0 && errno == EINTR);
  if (got != pid) {
    throw Error(TESSERA_ERR_INTERNAL,
                fmt::format("waiting for child process {} failed: {}", pid, std::strerror(errno)));
  }
  result.max_rss_kib = usage.ru_maxrss;
  return result;
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

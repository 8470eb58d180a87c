// Signals the launcher reacts to, turned into bytes on a pipe so that its
// poll() loop sees them next to the ranks' output (the self-pipe pattern).
#pragma once

#include <signal.h>

#include <vector>

namespace tessera::cli {

// While an object lives: SIGINT, SIGTERM and SIGCHLD are caught and each
// delivery writes the signal number to a non-blocking pipe; SIGPIPE is
// ignored (a closed stdout must not kill the launcher before it has cleaned
// up). The destructor restores the previous dispositions. Only one object
// may exist at a time (the handler writes to a process-wide descriptor).
// Throws tessera::Error if the pipe or a handler cannot be installed.
class SignalPipe {
 public:
  SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;
  ~SignalPipe();

  // Descriptor that becomes readable when a signal has arrived.
  [[nodiscard]] int fd() const noexcept { return read_fd_; }

  // The signals received since the last call, in arrival order (a SIGCHLD
  // may stand for several children). Never blocks.
  std::vector<int> take();

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_chld_ {};
  struct sigaction old_pipe_ {};
};

}  // namespace tessera::cli

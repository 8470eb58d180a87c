#include "launch_signals.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "tessera/sdk/error.hpp"

namespace tessera::cli {
namespace {

// Write end used by the handler; -1 when no SignalPipe exists.
volatile sig_atomic_t g_signal_fd = -1;

extern "C" void on_signal(int signal) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(signal);
  // A full pipe drops the byte: the loop is already due to wake up.
  ssize_t ignored = ::write(g_signal_fd, &byte, 1);
  (void)ignored;
  errno = saved;
}

void install(int signal, void (*handler)(int), struct sigaction* old) {
  struct sigaction action {};
  action.sa_handler = handler;
  ::sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | (signal == SIGCHLD ? SA_NOCLDSTOP : 0);
  if (::sigaction(signal, &action, old) != 0) {
    throw Error(TESSERA_ERR_INTERNAL, fmt::format("cannot install the launcher's handler for "
                                                  "signal {}: {}",
                                                  signal, std::strerror(errno)));
  }
}

}  // namespace

SignalPipe::SignalPipe() {
  std::array<int, 2> fds{};
  if (::pipe2(fds.data(), O_CLOEXEC | O_NONBLOCK) != 0) {
    throw Error(TESSERA_ERR_INTERNAL,
                fmt::format("cannot create the launcher's signal pipe: {}", std::strerror(errno)));
  }
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  g_signal_fd = write_fd_;
  try {
    install(SIGINT, on_signal, &old_int_);
    install(SIGTERM, on_signal, &old_term_);
    install(SIGCHLD, on_signal, &old_chld_);
    install(SIGPIPE, SIG_IGN, &old_pipe_);
  } catch (...) {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGCHLD, &old_chld_, nullptr);
    g_signal_fd = -1;
    ::close(read_fd_);
    ::close(write_fd_);
    throw;
  }
}

SignalPipe::~SignalPipe() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGCHLD, &old_chld_, nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  g_signal_fd = -1;
  ::close(read_fd_);
  ::close(write_fd_);
}

std::vector<int> SignalPipe::take() {
  std::vector<int> signals;
  std::array<unsigned char, 64> buffer{};
  for (;;) {
    const ssize_t n = ::read(read_fd_, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) signals.push_back(buffer[static_cast<std::size_t>(i)]);
  }
  return signals;
}

}  // namespace tessera::cli

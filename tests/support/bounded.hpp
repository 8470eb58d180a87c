// Runs a piece of code that could block (opening a FIFO, reading a device)
// in a forked child with a deadline, so a regression fails the test instead
// of hanging it.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <exception>
#include <string>

#include "tessera/sdk/error.hpp"

namespace tessera::test {

// The message of the tessera::Error `body` throws, run in a child process
// that SIGALRM ends after `seconds`. Fails the test (and returns "") when
// the child blocks past the deadline, throws nothing or something else, or
// dies otherwise.
template <typename Body>
std::string error_within(unsigned seconds, Body&& body) {
  int fds[2];
  if (::pipe(fds) != 0) {
    ADD_FAILURE() << "pipe: " << std::strerror(errno);
    return "";
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return "";
  }
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(seconds);
    std::string message = "no error was thrown";
    int code = 2;
    try {
      body();
    } catch (const Error& e) {
      message = e.what();
      code = 0;
    } catch (const std::exception& e) {
      message = std::string("not a tessera::Error: ") + e.what();
    }
    const char* at = message.data();
    size_t left = message.size();
    while (left > 0) {
      const ssize_t n = ::write(fds[1], at, left);
      if (n <= 0) break;
      at += n;
      left -= static_cast<size_t>(n);
    }
    ::_exit(code);
  }
  ::close(fds[1]);
  std::string message;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::read(fds[0], buffer, sizeof buffer)) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    message.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    ADD_FAILURE() << "the code under test "
                  << (WTERMSIG(status) == SIGALRM
                          ? "blocked for " + std::to_string(seconds) + " s"
                          : "died of signal " + std::to_string(WTERMSIG(status)));
    return "";
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ADD_FAILURE() << message;
    return "";
  }
  return message;
}

}  // namespace tessera::test

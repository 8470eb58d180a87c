// A file descriptor closed on scope exit, for the core's file I/O
// (checkpoint files, the file store).
#pragma once

#include <unistd.h>

#include <cerrno>

namespace tessera {

class FdGuard {
 public:
  explicit FdGuard(int fd) noexcept : fd_(fd) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }
  // Closes now and reports close()'s errno (0 on success, or when already
  // closed).
  int close_now() noexcept {
    const int fd = fd_;
    if (fd < 0) return 0;
    fd_ = -1;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

}  // namespace tessera

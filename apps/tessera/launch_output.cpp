#include "launch_output.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace tessera::cli {

bool write_all(int fd, std::string_view data) noexcept {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        // A descriptor shared in non-blocking mode: wait until it drains.
        pollfd ready{fd, POLLOUT, 0};
        if (::poll(&ready, 1, -1) >= 0 || errno == EINTR) continue;
      }
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

void LinePrefixer::emit(std::string_view line) {
  scratch_.assign(prefix_);
  scratch_.append(line);
  scratch_.push_back('\n');
  (void)write_all(fd_, scratch_);
}

void LinePrefixer::feed(const char* data, std::size_t size) {
  std::string_view rest(data, size);
  while (!rest.empty()) {
    const std::size_t newline = rest.find('\n');
    if (newline == std::string_view::npos) {
      partial_.append(rest);
      break;
    }
    if (partial_.empty()) {
      emit(rest.substr(0, newline));
    } else {
      partial_.append(rest.substr(0, newline));
      emit(partial_);
      partial_.clear();
    }
    rest.remove_prefix(newline + 1);
  }
  while (partial_.size() >= kMaxLine) {
    emit(std::string_view(partial_).substr(0, kMaxLine));
    partial_.erase(0, kMaxLine);
  }
}

void LinePrefixer::finish() {
  if (partial_.empty()) return;
  emit(partial_);
  partial_.clear();
}

}  // namespace tessera::cli

// Sockets on 127.0.0.1 for tests of the network stores and backends.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace tessera::test {

// A socket listening on 127.0.0.1 at a port the system chose. It accepts
// nobody: the kernel completes handshakes and then nothing answers, and the
// port is in use while it lives.
class LoopbackListener {
 public:
  LoopbackListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    auto* sa =
        reinterpret_cast<sockaddr*>(&addr);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
    if (fd_ < 0 || ::bind(fd_, sa, len) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, sa, &len) != 0) {
      if (fd_ >= 0) ::close(fd_);
      throw std::runtime_error("cannot listen on 127.0.0.1");
    }
    port_ = ntohs(addr.sin_port);
  }
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;
  ~LoopbackListener() { ::close(fd_); }
  [[nodiscard]] int32_t port() const noexcept { return port_; }

 private:
  int fd_ = -1;
  int32_t port_ = 0;
};

// A port of 127.0.0.1 that was free a moment ago (bound, read, released).
inline int32_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  auto* sa =
      reinterpret_cast<sockaddr*>(&addr);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  const bool ok = fd >= 0 && ::bind(fd, sa, len) == 0 && ::getsockname(fd, sa, &len) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("cannot bind a port on 127.0.0.1");
  return ntohs(addr.sin_port);
}

}  // namespace tessera::test

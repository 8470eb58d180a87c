#include "sockets.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <map>

#include <gloo/transport/address.h>
#include <gloo/transport/pair.h>

namespace tessera::gloo_backend {
namespace {

std::optional<sockaddr_storage> endpoint_of(int fd, bool remote) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  auto* addr = reinterpret_cast<sockaddr*>(&ss);  // NOLINT: the sockets API's own cast
  const int rv = remote ? ::getpeername(fd, addr, &len) : ::getsockname(fd, addr, &len);
  if (rv != 0 || (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)) return std::nullopt;
  return ss;
}

bool matches(int fd, bool remote, const std::string& spelling) {
  const auto ss = endpoint_of(fd, remote);
  if (!ss) return false;
  for (const auto& s : endpoint_spellings(*ss)) {
    if (s == spelling) return true;
  }
  return false;
}

// Descriptor numbers open in this process.
std::vector<int> open_descriptors() {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    fds.push_back(std::atoi(entry->d_name));  // NOLINT(cert-err34-c): names are digits
  }
  ::closedir(dir);
  return fds;
}

}  // namespace

std::vector<std::string> endpoint_spellings(const sockaddr_storage& address) {
  std::array<char, INET6_ADDRSTRLEN> buf{};
  uint16_t raw_port = 0;
  const void* src = nullptr;
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);  // NOLINT
    src = &in->sin_addr;
    raw_port = in->sin_port;
  } else if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);  // NOLINT
    src = &in6->sin6_addr;
    raw_port = in6->sin6_port;
  } else {
    return {};
  }
  if (::inet_ntop(address.ss_family, src, buf.data(), buf.size()) == nullptr) return {};
  const std::string host = "[" + std::string(buf.data()) + "]:";
  std::vector<std::string> out{host + std::to_string(ntohs(raw_port))};
  if (ntohs(raw_port) != raw_port) out.push_back(host + std::to_string(raw_port));
  return out;
}

std::vector<std::string> local_endpoints(gloo::Context& context) {
  std::vector<std::string> out(static_cast<size_t>(context.size));
  for (int k = 0; k < context.size; ++k) {
    if (k == context.rank) continue;
    auto& pair = context.getPair(k);
    if (pair) out[static_cast<size_t>(k)] = pair->address().str();
  }
  return out;
}

PairSockets PairSockets::find(const std::vector<std::string>& local,
                              const std::vector<std::string>& remote) {
  // One pass over the descriptors: every connected socket by the spellings
  // of its local endpoint.
  struct Candidate {
    int fd;
    sockaddr_storage remote;
  };
  std::multimap<std::string, Candidate> by_local;
  for (const int fd : open_descriptors()) {
    const auto mine = endpoint_of(fd, false);
    const auto theirs = endpoint_of(fd, true);
    if (!mine || !theirs) continue;
    for (auto& spelling : endpoint_spellings(*mine)) {
      by_local.emplace(std::move(spelling), Candidate{fd, *theirs});
    }
  }
  PairSockets result;
  for (size_t k = 0; k < local.size() && k < remote.size(); ++k) {
    if (local[k].empty() || remote[k].empty()) continue;
    const auto [first, last] = by_local.equal_range(local[k]);
    for (auto it = first; it != last; ++it) {
      const auto spellings = endpoint_spellings(it->second.remote);
      if (std::find(spellings.begin(), spellings.end(), remote[k]) == spellings.end()) continue;
      const int fd = it->second.fd;
      int bytes = 0;
      socklen_t len = sizeof bytes;
      if (::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, &len) != 0) bytes = 0;
      result.sockets_.push_back(Socket{static_cast<int32_t>(k), fd, local[k], remote[k], bytes});
      break;
    }
  }
  return result;
}

void PairSockets::shutdown_all() const noexcept {
  for (const Socket& s : sockets_) {
    if (matches(s.fd, false, s.local) && matches(s.fd, true, s.remote)) {
      ::shutdown(s.fd, SHUT_RDWR);
    }
  }
}

bool PairSockets::closed(int32_t peer) const noexcept {
  for (const Socket& s : sockets_) {
    if (s.peer == peer) return !matches(s.fd, false, s.local) || !matches(s.fd, true, s.remote);
  }
  return false;
}

void PairSockets::restore_send_buffers() const noexcept {
  for (const Socket& s : sockets_) {
    int bytes = 0;
    socklen_t len = sizeof bytes;
    if (::getsockopt(s.fd, SOL_SOCKET, SO_SNDBUF, &bytes, &len) != 0 || bytes >= s.send_buffer) {
      continue;
    }
    if (!matches(s.fd, false, s.local) || !matches(s.fd, true, s.remote)) continue;
    // The kernel doubles the value it is given (room for its bookkeeping).
    const int half = s.send_buffer / 2;
    ::setsockopt(s.fd, SOL_SOCKET, SO_SNDBUF, &half, sizeof half);
  }
}

std::optional<int32_t> rank_named_in(std::string_view text,
                                     const std::vector<std::string>& endpoints) {
  for (size_t k = 0; k < endpoints.size(); ++k) {
    const std::string& e = endpoints[k];
    if (e.empty()) continue;
    for (size_t pos = text.find(e); pos != std::string_view::npos; pos = text.find(e, pos + 1)) {
      const size_t end = pos + e.size();
      if (end >= text.size() || std::isdigit(static_cast<unsigned char>(text[end])) == 0) {
        return static_cast<int32_t>(k);
      }
    }
  }
  return std::nullopt;
}

}  // namespace tessera::gloo_backend

#include "device.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <exception>

#include <gloo/transport/tcp/device.h>

#include "tessera/sdk/error.hpp"

namespace tessera::gloo_backend {
namespace {

bool is_loopback_name(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0 ||
         host == "ip6-localhost";
}

// Text form of the IPv4 or IPv6 address in `ss`.
std::string address_text(const sockaddr_storage& ss) {
  std::array<char, INET6_ADDRSTRLEN> buf{};
  const void* src = nullptr;
  if (ss.ss_family == AF_INET) {
    src = &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr;  // NOLINT
  } else if (ss.ss_family == AF_INET6) {
    src = &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;  // NOLINT
  } else {
    return "";
  }
  if (inet_ntop(ss.ss_family, src, buf.data(), buf.size()) == nullptr) return "";
  return buf.data();
}

// The local address a UDP socket connected to master:port gets from the
// kernel's routing table. connect() on UDP sends nothing.
std::string route_to(const std::string& master, int32_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port > 0 ? port : 29500);
  const int rv = ::getaddrinfo(master.c_str(), service.c_str(), &hints, &found);
  if (rv != 0 || found == nullptr) {
    throw Error(
        TESSERA_ERR_INVALID_ARGUMENT,
        detail::concat("gloo: cannot resolve MASTER_ADDR='", master, "': ", ::gai_strerror(rv),
                       " (set option hostname or interface to choose the address)"));
  }
  std::string local;
  for (const addrinfo* ai = found; ai != nullptr && local.empty(); ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {  // NOLINT
        local = address_text(ss);
      }
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (local.empty()) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("gloo: no local address routes to MASTER_ADDR='", master,
                               "' (set option hostname or interface)"));
  }
  return local;
}

}  // namespace

DeviceChoice make_device(const Settings& settings) {
  gloo::transport::tcp::attr attr;
  DeviceChoice choice;
  std::string origin;
  if (!settings.interface.empty()) {
    attr.iface = settings.interface;
    choice.description = "interface " + settings.interface;
    origin = "option interface = '" + settings.interface + "'";
  } else if (!settings.hostname.empty()) {
    attr.hostname = settings.hostname;
    choice.description = settings.hostname;
    origin = "option hostname = '" + settings.hostname + "'";
  } else if (settings.master_addr.empty() || is_loopback_name(settings.master_addr)) {
    attr.hostname = "127.0.0.1";
    choice.description = settings.master_addr.empty()
                             ? "127.0.0.1 (MASTER_ADDR unset: one machine)"
                             : "127.0.0.1 (MASTER_ADDR is loopback: one machine)";
    origin = "the loopback address 127.0.0.1";
  } else {
    attr.hostname = route_to(settings.master_addr, settings.master_port);
    choice.description = attr.hostname + " (routes to MASTER_ADDR " + settings.master_addr + ")";
    origin = "address " + attr.hostname + " (the route to MASTER_ADDR)";
  }
  try {
    choice.device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("gloo: cannot create the TCP device on ", origin, ": ", e.what()));
  }
  return choice;
}

}  // namespace tessera::gloo_backend

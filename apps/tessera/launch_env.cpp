#include "launch_env.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <system_error>

#include <fmt/format.h>

#include "tessera/sdk/error.hpp"

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace tessera::cli {

std::vector<std::pair<std::string, std::string>> rank_variables(const LaunchTopology& topology,
                                                                int local_rank) {
  const int rank = topology.node_rank * topology.nproc_per_node + local_rank;
  std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(topology.nnodes * topology.nproc_per_node)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(topology.nproc_per_node)},
      {"GROUP_RANK", std::to_string(topology.node_rank)},
      {"MASTER_ADDR", topology.master_addr},
      {"MASTER_PORT", std::to_string(topology.master_port)},
      {"TESSERA_RUN_ID", topology.run_id},
  };
  if (!topology.rendezvous_dir.empty()) {
    vars.emplace_back("TESSERA_RENDEZVOUS_DIR", topology.rendezvous_dir);
  }
  return vars;
}

std::vector<std::string> merge_environment(
    const std::vector<std::string>& base,
    const std::vector<std::pair<std::string, std::string>>& variables) {
  std::vector<std::string> merged;
  merged.reserve(base.size() + variables.size());
  for (const std::string& entry : base) {
    const std::string_view name = std::string_view(entry).substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [key, value] : variables) {
      if (name == key) {
        replaced = true;
        break;
      }
    }
    if (!replaced) merged.push_back(entry);
  }
  for (const auto& [key, value] : variables) {
    std::string entry = key;
    entry += '=';
    entry += value;
    merged.push_back(std::move(entry));
  }
  return merged;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    env.emplace_back(*entry);
  }
  return env;
}

namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const noexcept { freeaddrinfo(info); }
};

// The port a bound socket got, or -1.
int bound_port(int fd) {
  sockaddr_storage storage{};
  socklen_t length = sizeof(storage);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &length) != 0) return -1;
  if (storage.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  }
  if (storage.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  }
  return -1;
}

}  // namespace

int find_free_port(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* raw = nullptr;
  const int rc = getaddrinfo(address.c_str(), "0", &hints, &raw);
  if (rc != 0) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                fmt::format("cannot resolve master address '{}' to pick a free port: {}", address,
                            gai_strerror(rc)));
  }
  const std::unique_ptr<addrinfo, AddrInfoDeleter> list(raw);
  std::string last_error = "no address to bind";
  for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int port = -1;
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      port = bound_port(fd);
    } else {
      last_error = std::strerror(errno);
    }
    ::close(fd);
    if (port > 0) return port;
  }
  throw Error(TESSERA_ERR_INTERNAL,
              fmt::format("cannot bind a TCP socket on master address '{}' to pick a free port: "
                          "{} (pass --master-port, or a local --master-addr)",
                          address, last_error));
}

std::string random_run_id() {
  std::random_device device;
  std::mt19937_64 engine((static_cast<uint64_t>(device()) << 32U) ^ device());
  return fmt::format("{:016x}", engine());
}

RendezvousDir::RendezvousDir() {
  const char* tmpdir = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe)
  const std::filesystem::path parent =
      (tmpdir != nullptr && *tmpdir != '\0') ? std::filesystem::path(tmpdir) : "/tmp";
  std::string pattern = (parent / "tessera-launch-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw Error(TESSERA_ERR_INTERNAL,
                fmt::format("cannot create the rendezvous directory under '{}' (from TMPDIR or "
                            "/tmp): {}",
                            parent.string(), std::strerror(errno)));
  }
  path_ = pattern;
}

RendezvousDir::~RendezvousDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);  // best effort: nothing to report to at exit
}

}  // namespace tessera::cli

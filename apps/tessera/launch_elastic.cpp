#include "launch_elastic.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli_error.hpp"
#include "launch_output.hpp"
#include "launch_supervisor.hpp"
#include "tessera/core/tcp_store.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {
namespace {

using Clock = std::chrono::steady_clock;
using TcpStoreClient = store::TcpStoreClient;
using TcpStoreServer = store::TcpStoreServer;

constexpr std::chrono::milliseconds kPoll{50};
// Polling a round that this launcher waits to join, less often.
constexpr std::chrono::milliseconds kIdlePoll{200};
// The store process stops this long after the last launcher disconnected.
constexpr std::chrono::milliseconds kStoreLinger{5000};

std::vector<char> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<char>& value) { return {value.begin(), value.end()}; }

std::optional<int> whole_number(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string key(int round, const std::string& what) {
  return fmt::format("round{}/{}", round, what);
}

}  // namespace

std::pair<int, int> parse_nnodes(const std::string& text) {
  const auto colon = text.find(':');
  const std::string_view whole(text);
  const auto low = whole_number(whole.substr(0, colon));
  const auto high = colon == std::string::npos ? low : whole_number(whole.substr(colon + 1));
  if (!low || !high) {
    throw UsageError(
        fmt::format("--nnodes must be a node count N or a range MIN:MAX, got '{}'", text));
  }
  if (*low < 1) throw UsageError(fmt::format("--nnodes must be at least 1, got {}", *low));
  if (*high < *low) {
    throw UsageError(
        fmt::format("--nnodes {}: the maximum {} is below the minimum {}", text, *high, *low));
  }
  return {*low, *high};
}

namespace {

// What the store process tells the launcher that started it.
struct StoreStart {
  char served = 0;  // 'S': serving; 'E': the address could not be bound
  pid_t pid = 0;
};

// The store process: serves `host`:`port` until no launcher has been
// connected for kStoreLinger (or none came within `first_client`), then
// exits. Never returns.
[[noreturn]] void run_store_process(const std::string& host, int port,
                                    std::chrono::milliseconds first_client, int report_fd) {
  for (const int sig : {SIGINT, SIGTERM, SIGCHLD, SIGHUP}) (void)::signal(sig, SIG_DFL);
  (void)::signal(SIGPIPE, SIG_IGN);
  // Holds none of the launcher's output: a reader of it sees its end when
  // the launchers end, not when this process does.
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (const int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) (void)::dup2(null_fd, fd);
  StoreStart start;
  start.pid = ::getpid();
  std::unique_ptr<TcpStoreServer> server;
  try {
    server = std::make_unique<TcpStoreServer>(host, port);
    start.served = 'S';
  } catch (const std::exception&) {
    start.served = 'E';
  }
  (void)write_all(report_fd, std::string_view(reinterpret_cast<const char*>(&start),  // NOLINT
                                              sizeof start));
  ::close(report_fd);
  if (server) {
    auto quiet_since = Clock::now();
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (server->connections() > 0) {
        quiet_since = Clock::now();
      } else if (Clock::now() - quiet_since >=
                 (server->accepted() > 0 ? kStoreLinger : first_client)) {
        break;
      }
    }
    (void)server->stop(std::chrono::milliseconds(0));
  }
  ::_exit(0);
}

// Starts the store process for the launchers on `host`:`port`, detached
// from this launcher (its own session, reparented to init) so that it
// outlives it: any launcher, the first one included, may be lost. Returns
// its pid, or 0 when the address could not be bound there (another
// launcher's store process serves it).
pid_t start_store_process(const std::string& host, int port,
                          std::chrono::milliseconds first_client) {
  std::array<int, 2> fds{};
  TESSERA_CHECK(::pipe2(fds.data(), O_CLOEXEC) == 0, TESSERA_ERR_INTERNAL,
                "elastic: cannot make a pipe for the rendezvous store: ", std::strerror(errno));
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    (void)::setsid();
    const pid_t store = ::fork();
    if (store != 0) ::_exit(store < 0 ? 1 : 0);
    run_store_process(host, port, first_client, fds[1]);
  }
  ::close(fds[1]);
  if (child < 0) {
    ::close(fds[0]);
    throw Error(TESSERA_ERR_INTERNAL, fmt::format("elastic: cannot start the rendezvous store: {}",
                                                  std::strerror(errno)));
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  StoreStart start;
  size_t got = 0;
  while (got < sizeof start) {
    const ssize_t n =
        ::read(fds[0], reinterpret_cast<char*>(&start) + got, sizeof start - got);  // NOLINT
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fds[0]);
  return got == sizeof start && start.served == 'S' ? start.pid : 0;
}

}  // namespace

ElasticRendezvous::ElasticRendezvous(ElasticSettings settings, Log log)
    : settings_(std::move(settings)), log_(std::move(log)) {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  id_ = fmt::format("{} pid {}", host.data(), ::getpid());
  const pid_t store =
      start_store_process(settings_.master_addr, settings_.master_port, settings_.join_timeout);
  if (store > 0) {
    log_(
        fmt::format("elastic: serving the rendezvous store on {}:{} (pid {}, until no launcher "
                    "is connected)",
                    settings_.master_addr, settings_.master_port, store));
  }
  // Otherwise another launcher's store serves it, or the port is taken by
  // something else, which the client's hello names.
  client_ = std::make_unique<TcpStoreClient>(
      settings_.master_addr, settings_.master_port, settings_.run_id + "/elastic",
      settings_.join_timeout.count(),
      "--master-addr:--master-port, the rendezvous of the launchers");
}

ElasticRendezvous::~ElasticRendezvous() = default;

int64_t ElasticRendezvous::current_round() { return client_->add("current", 0); }

std::optional<RoundAssignment> ElasticRendezvous::join(const Interrupted& interrupted) {
  for (;;) {
    if (client_->check({"done"})) return std::nullopt;
    const int round = static_cast<int>(current_round());
    const auto arrival = static_cast<int>(client_->add(key(round, "joined"), 1));
    client_->set(key(round, fmt::format("nproc/{}", arrival - 1)),
                 bytes(std::to_string(settings_.nproc_per_node)));
    client_->set(key(round, fmt::format("launcher/{}", arrival - 1)), bytes(id_));

    // The round closes at MAX nodes, or `last_call` after the count last
    // grew once it is at least MIN; whoever sees that first closes it.
    const auto deadline = Clock::now() + settings_.join_timeout;
    int64_t seen = 0;
    auto grew = Clock::now();
    int nodes = 0;
    for (;;) {
      if (interrupted()) return std::nullopt;
      if (client_->check({key(round, "closed")})) {
        nodes = whole_number(text(client_->get(key(round, "closed"), -1))).value_or(0);
        break;
      }
      const int64_t count = client_->add(key(round, "joined"), 0);
      if (count != seen) {
        seen = count;
        grew = Clock::now();
      }
      const bool full = count >= settings_.max_nodes;
      if (full || (count >= settings_.min_nodes && Clock::now() - grew >= settings_.last_call)) {
        const auto closing = std::min<int64_t>(count, settings_.max_nodes);
        const auto cas = client_->compare_and_set(key(round, "closed"), std::nullopt,
                                                  bytes(std::to_string(closing)));
        nodes = whole_number(text(cas.value.value_or(std::vector<char>{}))).value_or(0);
        break;
      }
      if (Clock::now() >= deadline) {
        throw Error(TESSERA_ERR_TIMEOUT,
                    fmt::format("elastic: round {} at {}:{}: {} node{} joined within {} "
                                "(--rdzv-timeout), fewer than the {} that --nnodes {}:{} needs",
                                round, settings_.master_addr, settings_.master_port, count,
                                count == 1 ? "" : "s", duration_text(settings_.join_timeout),
                                settings_.min_nodes, settings_.min_nodes, settings_.max_nodes));
      }
      std::this_thread::sleep_for(kPoll);
    }
    if (arrival > nodes) {
      log_(
          fmt::format("elastic: round {} closed with {} node{} before this one joined; waiting "
                      "for the next restart",
                      round, nodes, nodes == 1 ? "" : "s"));
      if (!await_next_round(round, interrupted)) return std::nullopt;
      continue;
    }

    RoundAssignment a;
    a.round = round;
    a.node = arrival - 1;
    a.nodes = nodes;
    for (int k = 0; k < nodes; ++k) {
      const std::string nproc_key = key(round, fmt::format("nproc/{}", k));
      const std::string value = text(client_->get(nproc_key, settings_.join_timeout.count()));
      if (whole_number(value) != settings_.nproc_per_node) {
        throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                    fmt::format("elastic: round {}: node {} starts {} ranks and this node (node "
                                "{}) {}: every launcher must be given the same -n",
                                round, k, value, a.node, settings_.nproc_per_node));
      }
    }
    // The ranks' own MASTER_ADDR:MASTER_PORT (where their rank 0 serves its
    // store): a fresh port of node 0's address, as the others reach it.
    const std::string master_key = key(round, "master");
    if (a.node == 0) {
      const std::string address = client_->local_address();
      client_->set(master_key, bytes(fmt::format("{}:{}", address, find_free_port(address))));
    }
    const std::string master = text(client_->get(master_key, settings_.join_timeout.count()));
    const auto colon = master.rfind(':');
    a.topology.nproc_per_node = settings_.nproc_per_node;
    a.topology.nnodes = nodes;
    a.topology.node_rank = a.node;
    a.topology.master_addr = master.substr(0, colon);
    a.topology.master_port = whole_number(master.substr(colon + 1)).value_or(0);
    a.topology.run_id = fmt::format("{}-r{}", settings_.run_id, round);
    compare_with_previous(a);
    return a;
  }
}

std::vector<std::string> ElasticRendezvous::launchers(int round, int nodes) {
  std::vector<std::string> ids;
  ids.reserve(static_cast<size_t>(std::max(nodes, 0)));
  for (int k = 0; k < nodes; ++k) {
    ids.push_back(text(
        client_->get(key(round, fmt::format("launcher/{}", k)), settings_.join_timeout.count())));
  }
  return ids;
}

void ElasticRendezvous::compare_with_previous(RoundAssignment& a) {
  if (a.round == 0) return;
  const std::vector<std::string> now = launchers(a.round, a.nodes);
  const int before_nodes =
      whole_number(text(client_->get(key(a.round - 1, "closed"), settings_.join_timeout.count())))
          .value_or(0);
  const std::vector<std::string> before = launchers(a.round - 1, before_nodes);
  for (size_t k = 0; k < before.size(); ++k) {
    if (std::find(now.begin(), now.end(), before[k]) == now.end()) {
      a.left.push_back(fmt::format("node {} ({})", k, before[k]));
    }
  }
  for (size_t k = 0; k < now.size(); ++k) {
    if (std::find(before.begin(), before.end(), now[k]) == before.end()) {
      a.joined.push_back(fmt::format("node {} ({})", k, now[k]));
    }
  }
}

bool ElasticRendezvous::await_next_round(int round, const Interrupted& interrupted) {
  for (;;) {
    if (interrupted() || client_->check({"done"})) return false;
    if (current_round() > round) return true;
    std::this_thread::sleep_for(kIdlePoll);
  }
}

void ElasticRendezvous::report_failure(int round, const std::string& what) {
  (void)client_->compare_and_set(key(round, "failed"), std::nullopt, bytes(what));
}

std::optional<std::string> ElasticRendezvous::failure(int round) {
  const std::string failed = key(round, "failed");
  if (!client_->check({failed})) return std::nullopt;
  return text(client_->get(failed, -1));
}

void ElasticRendezvous::advance(int round) {
  (void)client_->compare_and_set("current", bytes(std::to_string(round)),
                                 bytes(std::to_string(round + 1)));
}

void ElasticRendezvous::finished(int round, int node) {
  (void)client_->compare_and_set("done", std::nullopt,
                                 bytes(fmt::format("round {}, node {}", round, node)));
}

}  // namespace tessera::cli

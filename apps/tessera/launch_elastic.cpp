#include "launch_elastic.hpp"

#include <algorithm>
#include <charconv>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli_error.hpp"
#include "common/tcp_store.hpp"
#include "launch_supervisor.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {
namespace {

using Clock = std::chrono::steady_clock;
using backend_store::TcpStoreClient;
using backend_store::TcpStoreServer;

constexpr std::chrono::milliseconds kPoll{50};
// Polling a round that this launcher waits to join, less often.
constexpr std::chrono::milliseconds kIdlePoll{200};

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

ElasticRendezvous::ElasticRendezvous(ElasticSettings settings, Log log)
    : settings_(std::move(settings)), log_(std::move(log)) {
  const std::string where = fmt::format("{}:{}", settings_.master_addr, settings_.master_port);
  try {
    server_ = std::make_unique<TcpStoreServer>(settings_.master_addr, settings_.master_port);
    log_(fmt::format("elastic: serving the rendezvous store on {}", where));
  } catch (const Error&) {
    // Another launcher serves it (or the port is taken by something else,
    // which the client's hello names).
  }
  client_ = std::make_unique<TcpStoreClient>(
      settings_.master_addr, settings_.master_port, settings_.run_id + "/elastic",
      settings_.join_timeout.count(),
      "--master-addr:--master-port, the rendezvous of the launchers");
}

ElasticRendezvous::~ElasticRendezvous() {
  client_.reset();
  if (!server_) return;
  const size_t left = server_->await_clients(settings_.join_timeout);
  if (left > 0) {
    log_(fmt::format("elastic: stopping the rendezvous store with {} launcher{} still connected",
                     left, left == 1 ? "" : "s"));
  }
  (void)server_->stop(std::chrono::milliseconds(0));
}

int64_t ElasticRendezvous::current_round() { return client_->add("current", 0); }

std::optional<RoundAssignment> ElasticRendezvous::join(const Interrupted& interrupted) {
  for (;;) {
    if (client_->check({"done"})) return std::nullopt;
    const int round = static_cast<int>(current_round());
    const auto arrival = static_cast<int>(client_->add(key(round, "joined"), 1));
    client_->set(key(round, fmt::format("nproc/{}", arrival - 1)),
                 bytes(std::to_string(settings_.nproc_per_node)));

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
    return a;
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

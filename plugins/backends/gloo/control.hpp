// The control channel of one world: a gloo context of its own, next to the
// data contexts of the groups, over which ranks ask each other how far they
// got on a group and announce aborts.
//
// One service thread receives every control message (a receive from any
// rank on one slot, re-posted after each message) and answers queries from
// the groups' atomic counters, so a rank answers even while its own threads
// are blocked inside a collective. Sends are posted at once, without
// waiting; a reaper thread waits for them to complete and frees them, and
// records a peer as lost when its connection fails. Nothing here ever waits
// with a gloo timeout, since a gloo timeout closes every pair of the context.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "group.hpp"
#include "rendezvous.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::gloo_backend {

// What one peer said about a group when asked.
struct PeerReport {
  enum class State : int32_t { kUnknown = 0, kHealthy = 1, kFailed = 2, kAborted = 3 };
  bool answered = false;
  bool lost = false;              // its control connection failed: the process is gone
  State state = State::kUnknown;  // kUnknown: the peer has no such group (yet or any more)
  uint64_t collectives = 0;       // collectives it posted on the group
  uint64_t sends_to_asker = 0;    // sends it posted to the asking rank
  uint64_t recvs_from_asker = 0;  // receives it posted from the asking rank
  std::string text;               // its error or abort reason, if any
};

class Control {
 public:
  // Serves the world's control context `connection` (size 1: nothing to
  // serve, no threads) for world rank `connection.context->rank`. Log lines
  // go through `host`.
  Control(const sdk::Host& host, Connection connection);
  Control(const Control&) = delete;
  Control& operator=(const Control&) = delete;
  // Stops the threads; later messages from peers are dropped.
  ~Control();

  // Makes `group` known to peers' queries and aborts; applies an abort that
  // arrived before the group was formed here.
  void add(const std::shared_ptr<Group>& group);
  // Forgets the group with this key.
  void remove(uint64_t key) noexcept;

  // Tells every other member of `group` that it was aborted with `reason`.
  // Never blocks; members that are gone are skipped.
  void send_abort(const Group& group, const std::string& reason) noexcept;

  // Asks the members `peers` (group ranks) of `group` about their progress
  // and waits until each has answered or is known lost, or `deadline`
  // passes. Returns one report per entry of `peers`.
  std::vector<PeerReport> ask(const Group& group, const std::vector<int32_t>& peers,
                              std::chrono::steady_clock::time_point deadline);

 private:
  struct Message;
  struct Outgoing;
  struct Request {
    std::vector<int32_t> world_ranks;
    std::vector<PeerReport> reports;
  };

  bool post(int32_t world_rank, const Message& message) noexcept;
  void serve();
  void reap();
  void handle(const Message& message);
  void answer(const Message& query);
  void mark_lost(int32_t world_rank) noexcept;

  sdk::Host host_;
  Connection connection_;
  std::vector<int> others_;  // world ranks still listened to (service thread only)

  std::mutex mu_;
  std::condition_variable cv_;  // answers, lost peers
  std::map<uint64_t, std::weak_ptr<Group>> groups_;
  std::map<uint64_t, std::pair<std::string, int32_t>> early_aborts_;  // key -> reason, world rank
  std::map<uint64_t, Request> requests_;
  uint64_t next_request_ = 0;
  std::vector<bool> lost_;

  std::mutex out_mu_;
  std::condition_variable out_cv_;
  std::deque<std::unique_ptr<Outgoing>> outgoing_;
  gloo::transport::UnboundBuffer* reaping_ = nullptr;  // guarded by out_mu_
  bool stopping_ = false;                              // guarded by out_mu_

  std::unique_ptr<Message> inbox_;
  std::mutex inbox_mu_;
  std::unique_ptr<gloo::transport::UnboundBuffer> inbox_buffer_;          // guarded by inbox_mu_
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> retired_;  // guarded by inbox_mu_
  bool serving_ = true;                                                   // guarded by inbox_mu_
  std::thread service_;
  std::thread reaper_;
};

}  // namespace tessera::gloo_backend

// One group of ranks as this process sees it: its gloo context, who is in
// it, how many operations this rank has posted on it, and whether it is
// still usable.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous.hpp"
#include "tessera/sdk/error.hpp"
#include "waits.hpp"

namespace tessera::gloo_backend {

// Who a group is. Identical on every member.
struct GroupIdentity {
  std::string id;                    // "w", "w.s2c1": unique in its world; also its store prefix
  uint64_t key = 0;                  // hash of id: names the group in control messages
  std::string name;                  // "world", "split 2 colour 1 of world": for messages
  std::vector<int32_t> world_ranks;  // world rank of each member, by group rank
  int32_t rank = 0;                  // this process's rank in the group
  [[nodiscard]] int32_t size() const noexcept { return static_cast<int32_t>(world_ranks.size()); }
};

// 64-bit FNV-1a of `id`, the group key of control messages.
uint64_t group_key(const std::string& id) noexcept;

// A group's state. Thread-safe: the counters and the state are read by the
// control service thread while operations run.
class Group {
 public:
  Group(GroupIdentity identity, Connection connection);
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group() = default;

  [[nodiscard]] const GroupIdentity& identity() const noexcept { return identity_; }
  [[nodiscard]] int32_t rank() const noexcept { return identity_.rank; }
  [[nodiscard]] int32_t size() const noexcept { return identity_.size(); }
  [[nodiscard]] const std::shared_ptr<gloo::Context>& context() const noexcept {
    return connection_.context;
  }
  [[nodiscard]] const PairSockets& sockets() const noexcept { return connection_.sockets; }
  // The group rank whose endpoint `text` (a transport error) names.
  [[nodiscard]] std::optional<int32_t> rank_in_error(const std::string& text) const;

  // ---- progress, reported to peers that ask ----
  // Counts a posted collective; returns its 1-based sequence number.
  uint64_t post_collective() noexcept { return collectives_.fetch_add(1) + 1; }
  // Counts a posted send to / receive from group rank `peer`; returns the
  // 1-based number of that kind towards that peer.
  uint64_t post_send(int32_t peer) noexcept;
  uint64_t post_recv(int32_t peer) noexcept;
  [[nodiscard]] uint64_t collectives_posted() const noexcept { return collectives_.load(); }
  [[nodiscard]] uint64_t sends_posted(int32_t peer) const noexcept;
  [[nodiscard]] uint64_t recvs_posted(int32_t peer) const noexcept;

  // ---- usability ----
  // Throws the group's error if it failed or was aborted. Cheap when healthy.
  void check() const {
    if (state_.load(std::memory_order_acquire) != kHealthy) throw_error();
  }
  [[nodiscard]] bool healthy() const noexcept { return state_.load() == kHealthy; }
  [[nodiscard]] bool aborted() const noexcept { return state_.load() == kAborted; }
  // The error later operations fail with, if any.
  [[nodiscard]] std::optional<Error> error() const;
  // The error, waiting for it until `deadline` if the group has none yet.
  [[nodiscard]] std::optional<Error> await_error(
      std::chrono::steady_clock::time_point deadline) const;
  // The reason given to abort(), or "" if the group was not aborted.
  [[nodiscard]] std::string abort_reason() const;
  // The first failure wins: records `error` unless the group already failed
  // or was aborted, breaks the sockets, and returns the error that stands.
  Error fail(const Error& error);
  // Marks the group aborted with `reason` (said by `origin`: "this rank" or
  // "rank 3"), breaks its sockets so that operations blocked in gloo return,
  // and aborts every group split from it. Later calls keep the first reason.
  void abort(const std::string& reason, const std::string& origin);
  // Records a group split from this one, so an abort reaches it too.
  void add_child(const std::shared_ptr<Group>& child);

  // Fails every pending operation of the group on this rank and, through
  // the closed connections, on the peers, and wakes the running
  // operations' waits (waits.hpp). The group is unusable afterwards.
  void break_sockets() noexcept;
  // True once break_sockets ran: transport errors after it are our own doing.
  [[nodiscard]] bool sockets_broken() const noexcept { return broken_.load(); }
  // The running operations' gloo buffers. An interrupted wait lets gloo go
  // on to its next step, which may wait again: once the sockets are broken
  // the watchdog interrupts them again every period until they are over.
  [[nodiscard]] WaitRegistry& waits() noexcept { return waits_; }

  // ---- deadline watch for operations gloo does not time out itself ----
  // The running operation must end by `deadline` (steady clock).
  void watch(std::chrono::steady_clock::time_point deadline) noexcept;
  void unwatch() noexcept { deadline_ns_.store(0, std::memory_order_release); }
  // Called periodically: breaks the sockets if the watched operation is past
  // its deadline. Returns true if it did.
  bool expire_if_late(std::chrono::steady_clock::time_point now) noexcept;
  // True (once) after expire_if_late ended an operation.
  bool take_expired() noexcept { return expired_.exchange(false); }

 private:
  enum : int { kHealthy = 0, kFailed = 1, kAborted = 2 };
  [[noreturn]] void throw_error() const;
  std::string describe() const;

  GroupIdentity identity_;
  Connection connection_;

  std::atomic<uint64_t> collectives_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> sends_;
  std::unique_ptr<std::atomic<uint64_t>[]> recvs_;

  std::atomic<int> state_{kHealthy};
  mutable std::mutex mu_;
  mutable std::condition_variable failed_;      // error_ was set
  std::optional<Error> error_;                  // guarded by mu_
  std::string abort_reason_;                    // guarded by mu_
  std::vector<std::weak_ptr<Group>> children_;  // guarded by mu_
  std::atomic<bool> broken_{false};
  WaitRegistry waits_;

  std::atomic<int64_t> deadline_ns_{0};  // 0: nothing watched
  std::atomic<bool> expired_{false};
};

}  // namespace tessera::gloo_backend

// One rank's handle on a group: posts operations, splits, aborts, and runs
// raw library calls for benchmarks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "engine.hpp"
#include "executor.hpp"
#include "failure.hpp"
#include "group.hpp"
#include "scratch.hpp"
#include "tessera/sdk/backend.hpp"
#include "work.hpp"

namespace tessera::gloo_backend {

class GlooComm final : public sdk::Comm {
 public:
  // Registers `group` with the engine's control service and watchdog.
  GlooComm(std::shared_ptr<Engine> engine, std::shared_ptr<Group> group);
  // Waits for queued work; if operations are still pending (the host did
  // not wait for them), fails the group first so they end.
  ~GlooComm() override;

  [[nodiscard]] int32_t rank() const override { return group_->rank(); }
  [[nodiscard]] int32_t size() const override { return group_->size(); }

  // Collective over this group: exchanges (color, key) with an allgather,
  // then the ranks of each colour connect a new gloo context under a store
  // prefix unique to (this group, split number, colour). Returns nullptr for
  // color < 0. Throws like post(), or Error(TIMEOUT / PEER_LOST) naming the
  // new group when connecting it fails.
  std::unique_ptr<sdk::Comm> split(int32_t color, int32_t key) override;

  // Fails every pending and later operation of the group on every member
  // with PEER_LOST carrying `reason`; groups split from it too.
  void abort(const char* reason) noexcept override;

  // Re-forms the group of the members still alive (comm_shrink in
  // tessera/c/backend.h) through the store, under "<world prefix>/<group
  // id>.x<n>", n counting this communicator's shrinks: each caller writes
  // alive/<its rank>, waits until every member's key is there or `grace_ms`
  // has passed since its call, and proposes the ranks it saw as `members`;
  // the first proposal stands (Store::put_if_absent). The members then
  // connect a new gloo context like split() does. The failed group is not
  // touched, and its abort does not reach the new one. Throws
  // Error(PEER_LOST) when this rank is not among the members, and
  // Error(TIMEOUT / PEER_LOST) naming the new group when connecting fails.
  std::unique_ptr<sdk::Comm> shrink(int64_t grace_ms) override;

  // comm_grow (tessera/c/backend.h). Processes that want to join claim the
  // next free entry of the run's join queue ("<run_id>/joinq/<i>", by
  // Store::put_if_absent) and wait for it to be decided. Members, on their
  // world (collectively): rank 0 decides every entry from the first
  // undecided one while entries are there ("admitted", unless the joiner
  // withdrew first), writes each admitted joiner its place and broadcasts
  // how many there are; then all of them connect a new world, members first,
  // under "<world prefix>/g<n>". A joining process (its world of itself
  // alone): claims an entry, waits `wait_ms` for the decision (on timeout
  // it withdraws, unless it was admitted meanwhile) and connects the world
  // it was admitted to. Returns nullptr on members when nobody was waiting.
  std::unique_ptr<sdk::Comm> grow(int64_t wait_ms) override;

  // Validates `args` (sdk::validate_coll_args), then runs it in posting
  // order: inline when blocking and nothing is queued, otherwise on the
  // worker thread (collectives) or a waiter thread (send/recv). Throws
  // Error(INVALID_ARGUMENT) for bad arguments, the group's error once it
  // failed or was aborted, and explain_failure's error when gloo fails.
  std::unique_ptr<sdk::Work> post(const tessera_coll_args& args, bool nonblocking) override;

  // The same gloo call as post() would make, on this group's context, with
  // no checks, counters, queueing or deadline watch. Throws Error(PEER_LOST)
  // with gloo's message when gloo fails.
  void raw(const tessera_coll_args& args) override;

 private:
  // grow() on a joining process's own world, and on a running world.
  std::unique_ptr<sdk::Comm> join(int64_t wait_ms);
  std::unique_ptr<sdk::Comm> admit();
  // Runs a collective of the backend's own (split's exchange, grow's
  // broadcast) through the normal path, after the queued operations.
  void run_internal(const tessera_coll_args& args, const char* label);
  // Runs collective `args` numbered `seq` with `timeout_ms` on this thread.
  void execute(const tessera_coll_args& args, uint64_t seq, int64_t timeout_ms,
               const std::string& label = {});
  std::unique_ptr<sdk::Work> post_p2p(const tessera_coll_args& args, bool nonblocking);
  [[nodiscard]] std::string where(const std::string& what) const;
  // Runs `body` on a worker or waiter thread and records its outcome in
  // `done`, counting the operation finished first.
  template <typename Body>
  void finish(Completion& done, Body&& body) noexcept;
  // Hands `job` to `runner` (the executor or the waiter pool), counted as
  // outstanding; rethrows, uncounted, when the runner cannot take it.
  template <typename Runner>
  void submit_counted(Runner& runner, Job job);

  std::shared_ptr<Engine> engine_;
  std::shared_ptr<Group> group_;
  Scratch scratch_;
  Scratch raw_scratch_;
  uint64_t splits_ = 0;
  uint64_t shrinks_ = 0;
  std::atomic<size_t> outstanding_{0};  // posted to a thread and not finished
  Executor executor_;                   // destroyed (joined) before the scratch and the group
  WaiterPool waiters_;                  // destroyed first
};

// What forming a world takes: this process's settings (its rank and the
// world's size in them), the store prefix of the world's keys, the transport
// device, the TCP store this process serves (or null) and the join queue's
// first undecided entry.
struct WorldStart {
  Settings settings;
  std::string prefix;
  DeviceChoice device;
  std::shared_ptr<Store> store_service;
  int64_t next_join = 0;
};

// Waits in the store until every rank of the world arrived, connects the
// world's data and control contexts and starts the control service; the
// world's communicator. Throws Error(TIMEOUT) naming the ranks that never
// arrived and Error(PEER_LOST) when connecting fails.
std::unique_ptr<GlooComm> connect_world(const sdk::Host& host, WorldStart start);

}  // namespace tessera::gloo_backend

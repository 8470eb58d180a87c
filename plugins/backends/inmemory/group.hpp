// Shared state of one group of ranks (the world, or a group made by split).
//
// Collective protocol, per operation number `seq` (counted by each rank; all
// ranks issue the same collectives in the same order):
//  1. join: the rank writes its Call (what it calls, and its buffer
//     pointers) into its own slot, then counts itself in with one CAS on the
//     group's arrival word (seq, count). The CAS that brings the count to the
//     group size commits the operation; after that nobody can back out.
//  2. Every rank reads all slots (they are stable until step 3 ends), checks
//     that the calls agree, and does its share of the data movement straight
//     between the published buffers (reduction blocks are claimed from the
//     group's block counter, so each is done by exactly one rank).
//  3. leave: the rank marks its share done and waits until every rank has;
//     only then may any rank return, reuse its slot or its buffers.
// A rank that is still waiting in step 1 when its deadline passes (or the
// group breaks) withdraws its arrival with a CAS; if that CAS fails the
// operation committed meanwhile and the rank completes it. So no rank ever
// reads or writes the buffers of a rank that has given up. There is no lock
// on this path: slots, the arrival word and the done counters are atomics
// and waits spin briefly, then sleep on a futex (see signal.hpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fault.hpp"
#include "mailbox.hpp"
#include "settings.hpp"
#include "signal.hpp"
#include "tessera/c/backend.h"

namespace tessera::inmemory {

// Call kind used by comm_split (beside the tessera_coll_type values).
inline constexpr int32_t kCollSplit = 1000;

// What one rank published for one collective operation.
struct Call {
  int32_t coll = 0;                 // tessera_coll_type or kCollSplit
  tessera_dtype dtype = 0;          // element type of the buffers used
  tessera_reduce_op op = 0;         // reductions only
  int32_t root = 0;                 // rooted collectives only
  uint64_t count = 0;               // per-rank count n (coll_block_count)
  const std::byte* send = nullptr;  // this rank's input (maybe a staging copy)
  std::byte* recv = nullptr;        // this rank's output
  int32_t color = 0;                // split only
  int32_t key = 0;                  // split only
};

// "allreduce(count=10, dtype=f32, op=sum)", naming only the relevant fields.
std::string describe(const Call& call);
// Name of the collective of `call` ("allreduce", "split").
std::string_view call_name(int32_t coll) noexcept;
// True when two ranks' calls are the same collective with the same shape.
bool calls_agree(const Call& a, const Call& b) noexcept;

// One group's shared state: per-rank slots, the arrival word, the block
// counter, the failure record, the mailboxes and the groups split from it.
// Thread-safe; each rank calls join/leave for its own slot only.
class Group {
 public:
  // A group whose rank r is world rank `world_ranks[r]`.
  Group(std::shared_ptr<const Engine> engine, std::vector<int32_t> world_ranks);
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group() = default;

  [[nodiscard]] int32_t size() const noexcept { return size_; }
  [[nodiscard]] int32_t world_rank(int32_t rank) const { return world_ranks_.at(rank); }
  [[nodiscard]] const Engine& engine() const noexcept { return *engine_; }
  [[nodiscard]] const std::shared_ptr<const Engine>& engine_ptr() const noexcept { return engine_; }
  // "rank 2" in the world, "rank 2 (world rank 5)" in a sub-group.
  [[nodiscard]] std::string rank_label(int32_t rank) const;

  // Step 1: publishes `call` for operation `seq` of `rank` and returns once
  // the operation committed. Throws Error(TIMEOUT) naming the ranks that
  // never arrived when `deadline` passes first (and breaks the group, with
  // `timeout_ms` in the message), or Error(PEER_LOST) when the group is or
  // becomes broken first.
  void join(int32_t rank, uint64_t seq, const Call& call, Deadline deadline, int64_t timeout_ms);
  // The call `rank` published; valid between join and the end of leave.
  [[nodiscard]] const Call& call(int32_t rank) const { return slots_[rank].call; }
  // Step 2 check: empty when all calls agree, else the mismatch message
  // naming the odd rank and both calls (identical on every rank).
  [[nodiscard]] std::string check_agreement(uint64_t seq) const;
  // Step 3: marks `rank`'s share of `seq` done and waits for all ranks.
  // Peers that committed always finish their share, so this has no timeout.
  void leave(int32_t rank, uint64_t seq);

  // Hands out reduction blocks of the committed operation: 0, 1, 2, ...
  // across all ranks (reset for every operation before it commits).
  uint64_t claim_block() noexcept { return next_block_.fetch_add(1, std::memory_order_relaxed); }

  // Failure state; see Fault.
  [[nodiscard]] const Fault& fault() const noexcept { return fault_; }
  // Breaks the group: records the first reason, wakes every waiter and fails
  // every posted receive. Returns false if it was already broken.
  bool fail(tessera_status status, std::string reason);
  // comm_abort from `rank`: breaks this group and every group split from it
  // with PEER_LOST carrying `reason`.
  void abort(int32_t rank, std::string_view reason);

  // The mailbox of `rank` (messages sent to it).
  Mailbox& mailbox(int32_t rank) { return *mailboxes_.at(rank); }

  // The group of colour `color` made by split operation `seq`: the first
  // member to ask creates it from `world_ranks` (ordered by key, then parent
  // rank); the rest receive the same object.
  std::shared_ptr<Group> split_child(uint64_t seq, int32_t color,
                                     const std::vector<int32_t>& world_ranks);

  // comm_shrink by `rank` (see tessera/c/backend.h): waits until every
  // member has called or `grace_ms` has passed since this call. The first
  // caller whose wait ends decides, once and under a lock: the members are
  // the ranks that have called by then, and it creates their group (not a
  // child of this one: this group's abort does not reach it). Returns that
  // group and this rank's place in it. Throws Error(PEER_LOST) when this
  // rank called after the decision, Error(INVALID_ARGUMENT) when it called
  // twice.
  std::pair<std::shared_ptr<Group>, int32_t> shrink(int32_t rank, int64_t grace_ms);

  [[nodiscard]] std::chrono::nanoseconds spin() const noexcept { return engine_->settings.spin; }

 private:
  struct alignas(64) Slot {
    Call call;
    std::atomic<uint64_t> arrived{0};  // last seq this rank joined
    std::atomic<uint64_t> done{0};     // last seq this rank finished
  };
  static constexpr unsigned kCountBits = 24;
  static constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;

  [[nodiscard]] bool committed(uint64_t seq) const noexcept;
  // Takes this rank's arrival back; false when the operation committed.
  bool withdraw(uint64_t seq);
  [[nodiscard]] std::string missing_ranks(uint64_t seq) const;
  // Breaks this group and, recursively, the groups split from it.
  void fail_tree(const std::string& why);

  std::shared_ptr<const Engine> engine_;
  std::vector<int32_t> world_ranks_;
  int32_t size_;
  std::vector<Slot> slots_;
  alignas(64) std::atomic<uint64_t> arrivals_;  // (seq << kCountBits) | count
  alignas(64) std::atomic<uint64_t> next_block_{0};
  Signal signal_;
  Fault fault_;
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;

  struct PendingChild {
    std::shared_ptr<Group> group;
    size_t left = 0;  // members that have not fetched it yet
  };
  std::mutex split_mu_;
  std::map<std::pair<uint64_t, int32_t>, PendingChild> pending_children_;
  std::vector<std::weak_ptr<Group>> children_;

  // The rendezvous of comm_shrink on this group.
  struct Shrink {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<bool> called;      // by rank; guarded by mu
    int32_t callers = 0;           // guarded by mu
    bool decided = false;          // guarded by mu
    std::vector<int32_t> members;  // ranks here, increasing; guarded by mu
    std::shared_ptr<Group> group;  // of the members; guarded by mu
  };
  Shrink shrink_;
};

}  // namespace tessera::inmemory

// Shared state of one group of thread ranks in the example_threads backend.
//
// Every communicator of a group (one per rank thread) points to the same
// Group. It holds what each rank published for the operation in progress, a
// generation-counted barrier built from one mutex and one condition variable,
// one message queue per ordered pair of ranks for send/recv, the abort
// flag, and the receives posted and not yet matched. Deliberately simple: one
// lock for everything.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <tessera/c/backend.h>

namespace example_threads {

using Clock = std::chrono::steady_clock;

// When a wait gives up; `forever` never does.
struct Deadline {
  bool forever = true;
  Clock::time_point at{};
  int64_t ms = -1;  // the timeout it was made from, for messages

  // A deadline `ms` milliseconds from now; ms < 0 means forever.
  static Deadline after(int64_t ms);
};

class Group;

// Marks a slot published by comm_split rather than by a collective.
inline constexpr tessera_coll_type kSplitCall = 1000;

// What one rank publishes for the operation in progress. The owner writes it
// before arriving at the first barrier of an operation; other ranks read it
// only between that barrier and the second one.
struct Slot {
  tessera_coll_args args{};  // args.coll == kSplitCall for comm_split
  int32_t color = -1;        // comm_split: colour and key of this rank
  int32_t key = 0;
  std::shared_ptr<Group> child;  // comm_split result, filled in by the settle hook
  int32_t child_rank = -1;
};

// A point-to-point message, copied out of the sender's buffer.
struct Message {
  int32_t tag = 0;
  tessera_dtype dtype = TESSERA_F32;
  uint64_t count = 0;
  std::vector<unsigned char> bytes;
};

// A posted receive. The group fills `dest` and completes it when the
// matching message arrives; `done`, `status` and `error` are guarded by the
// group's mutex until `done` is set, and never change afterwards.
struct RecvOp {
  int32_t from = 0;
  int32_t to = 0;
  int32_t tag = 0;
  tessera_buffer dest{};
  std::string what;  // names the receive in errors
  bool done = false;
  tessera_status status = TESSERA_OK;
  std::string error;
};

// Runs under the group lock in the last rank to arrive at a barrier, with
// every rank's slot. Returns "" when the ranks agree, else the reason they do
// not, which every rank of that barrier then receives.
using SettleHook = std::function<std::string(std::vector<Slot>& slots)>;

class Group {
 public:
  explicit Group(int32_t size);
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  [[nodiscard]] int32_t size() const noexcept { return size_; }

  // This rank's slot, to fill in before arriving, or a peer's slot to read
  // after the first barrier of an operation.
  Slot& slot(int32_t rank) { return slots_[static_cast<size_t>(rank)]; }

  // Barrier over all ranks of the group. Returns the settle hook's verdict
  // ("" if `settle` is null). Throws tessera::Error:
  //  - TIMEOUT when `deadline` passes first; the rank withdraws, so the group
  //    stays usable, and the message names the ranks that did not arrive;
  //  - PEER_LOST when the group is or becomes aborted (only if `abortable`).
  // A barrier that is not abortable must be one every rank is certain to
  // reach (the second barrier of a collective).
  std::string arrive_and_wait(int32_t rank, const std::string& what, const Deadline& deadline,
                              bool abortable, const SettleHook* settle);

  // Delivers `message` from rank `from` to rank `to`: into the oldest
  // receive posted for its tag, else into a queue. Never blocks; sends are
  // buffered. Throws PEER_LOST if the group is aborted.
  void send(int32_t from, int32_t to, Message message);

  // Posts `op`, matched in posting order against messages with its tag; it
  // completes at once if such a message is already queued. Throws PEER_LOST
  // if the group is aborted.
  void post_recv(const std::shared_ptr<RecvOp>& op);

  // Waits until `op` is done, the group is aborted, or `until` passes.
  // Withdraws and fails the receive on abort (PEER_LOST) and, if `expire`,
  // at `until` (TIMEOUT naming the peer and tag). Returns op->done.
  bool wait_recv(const std::shared_ptr<RecvOp>& op, const Deadline& until, bool expire);

  // Fails every pending and future wait of the group with PEER_LOST carrying
  // `reason`. Safe from any thread; the first reason wins.
  void abort(const std::string& reason);

 private:
  void throw_if_aborted(const std::string& what) const;  // mu_ held
  std::string missing_ranks() const;                     // mu_ held
  size_t pair(int32_t from, int32_t to) const noexcept {
    return static_cast<size_t>(from) * static_cast<size_t>(size_) + static_cast<size_t>(to);
  }
  void fail_recv(RecvOp& op, tessera_status status, std::string error);  // mu_ held

  const int32_t size_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int32_t waiting_ = 0;
  std::vector<char> arrived_;
  std::string verdict_;
  std::vector<Slot> slots_;
  std::vector<std::deque<Message>> queues_;                  // index from * size + to
  std::vector<std::deque<std::shared_ptr<RecvOp>>> posted_;  // likewise
  bool aborted_ = false;
  std::string abort_reason_;
};

}  // namespace example_threads

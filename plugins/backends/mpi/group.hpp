// One group of ranks as this process sees it: its two MPI communicators, its
// members, how many operations this rank posted on it, and whether it failed.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backoff.hpp"
#include "engine.hpp"
#include "tessera/c/common.h"

namespace tessera::mpi {

// A group of ranks. `data` carries the operations; `ctrl`, a duplicate of
// it, carries the control messages of the service thread (progress queries,
// failure notices) so they never match an operation's messages. Counters
// are written by the thread that owns the communicator and read by the
// service thread; the failure state may be set from any thread.
class Group {
 public:
  // Takes ownership of `data` and `ctrl` (freed in the destructor unless MPI
  // was finalized by then). `members` holds every rank's identity, in group
  // rank order; `rank` is this process's rank in the group.
  Group(std::shared_ptr<Engine> engine, MPI_Comm data, MPI_Comm ctrl, std::string name,
        int32_t rank, std::vector<Identity> members);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  [[nodiscard]] Engine& engine() const noexcept { return *engine_; }
  [[nodiscard]] const std::shared_ptr<Engine>& engine_ptr() const noexcept { return engine_; }
  [[nodiscard]] MPI_Comm data() const noexcept { return data_; }
  [[nodiscard]] MPI_Comm ctrl() const noexcept { return ctrl_; }
  [[nodiscard]] int32_t rank() const noexcept { return rank_; }
  [[nodiscard]] int32_t size() const noexcept { return size_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const Identity& member(int32_t rank) const { return members_.at(rank); }
  [[nodiscard]] const std::vector<Identity>& members() const noexcept { return members_; }
  // Largest tag MPI accepts on this group (MPI_TAG_UB).
  [[nodiscard]] int32_t tag_ub() const noexcept { return tag_ub_; }
  // This process's rank in MPI_COMM_WORLD, for log lines.
  [[nodiscard]] int32_t world_rank() const noexcept { return engine_->process().rank; }

  // Counts one more collective (or split) posted; returns its 1-based number.
  uint64_t begin_collective() noexcept { return bump(posted_); }
  [[nodiscard]] uint64_t collectives() const noexcept {
    return posted_.load(std::memory_order_relaxed);
  }
  // Counts one more send to / receive from `peer`; returns its number.
  uint64_t begin_send(int32_t peer) noexcept { return bump(p2p_[peer]); }
  uint64_t begin_recv(int32_t peer) noexcept { return bump(p2p_[size_ + peer]); }
  [[nodiscard]] uint64_t sends_to(int32_t peer) const noexcept {
    return p2p_[peer].load(std::memory_order_relaxed);
  }
  [[nodiscard]] uint64_t recvs_from(int32_t peer) const noexcept {
    return p2p_[size_ + peer].load(std::memory_order_relaxed);
  }

  // Counts one more split of this group; returns its 1-based number (names
  // the child: "split 2 of world"). Owner thread only.
  uint64_t next_split() noexcept { return ++splits_; }

  // True once the group failed (timeout, abort, lost peer).
  [[nodiscard]] bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  // Marks the group failed with `reason` unless it already is; true if this
  // call did it. Thread-safe.
  bool fail(tessera_status status, const std::string& reason);
  // fail(PEER_LOST, reason) on this group and every group split from it
  // (abort semantics); true if this group was not failed before.
  bool fail_tree(const std::string& reason);
  // The first failure's reason; empty while the group is healthy.
  [[nodiscard]] std::string failure() const;
  // Throws Error(PEER_LOST, "<what> on <label()> failed: the group is
  // broken: <reason>").
  [[noreturn]] void throw_failure(std::string_view what) const;

  // Remembers a group split from this one, for fail_tree().
  void add_child(const std::shared_ptr<Group>& child);

  // "rank 1 of group 'world' (4 ranks)".
  [[nodiscard]] std::string label() const;

 private:
  static uint64_t bump(std::atomic<uint64_t>& counter) noexcept {
    // One writer: a plain load and store avoid a locked instruction.
    const uint64_t next = counter.load(std::memory_order_relaxed) + 1;
    counter.store(next, std::memory_order_relaxed);
    return next;
  }

  std::shared_ptr<Engine> engine_;
  MPI_Comm data_;
  MPI_Comm ctrl_;
  std::string name_;
  int32_t rank_;
  int32_t size_;
  int32_t tag_ub_ = 32767;
  std::vector<Identity> members_;
  uint64_t splits_ = 0;
  std::atomic<uint64_t> posted_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> p2p_;  // [0, size): sends; [size, 2 size): recvs
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::string reason_;
  std::vector<std::weak_ptr<Group>> children_;
};

// Makes the group over `data` (taking ownership): sets MPI_ERRORS_RETURN,
// duplicates it into the control communicator (waiting until `deadline`),
// and attaches the group to the engine's control service. Throws
// Error(TIMEOUT) when the duplication does not complete in time (a member
// never joined), or the MPI error.
std::shared_ptr<Group> open_group(const std::shared_ptr<Engine>& engine, MPI_Comm data,
                                  std::string name, int32_t rank, std::vector<Identity> members,
                                  Deadline deadline);

}  // namespace tessera::mpi

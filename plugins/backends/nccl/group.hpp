// One NCCL communicator with its CUDA stream, the operations pending on it,
// and its failure state; the work handles that complete on CUDA events; the
// watchdog thread that looks after every group of a process.
//
// Communicators are non-blocking (ncclConfig_t.blocking = 0): no NCCL call
// waits for a peer. A group fails once, for good, when NCCL reports an
// asynchronous error (ncclCommGetAsyncError), when an operation outlives its
// timeout, or when it is aborted; the communicator is then aborted
// (ncclCommAbort), which ends its kernels, and every later operation fails
// with the same message.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda.hpp"
#include "progress.hpp"
#include "tessera/c/common.h"
#include "tessera/sdk/backend.hpp"

namespace tessera::nccl_backend {

using Clock = std::chrono::steady_clock;

class Group {
 public:
  // Takes ownership of `comm` (an initialised non-blocking communicator) and
  // creates the group's stream on `device`. `key` names the group in the
  // store, the same on every member; `board` is the run's progress board.
  Group(std::string name, int32_t device, ncclComm_t comm, std::string key,
        std::shared_ptr<ProgressBoard> board);
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  // Finalises and destroys the communicator (aborts it when that fails or
  // the group failed), then the stream.
  ~Group();

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] int32_t rank() const noexcept { return rank_; }
  [[nodiscard]] int32_t size() const noexcept { return size_; }
  [[nodiscard]] int32_t device() const noexcept { return device_; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  // "group 'world' (rank 1 of 4)".
  [[nodiscard]] std::string where() const;
  [[nodiscard]] const std::string& key() const noexcept { return key_; }
  [[nodiscard]] const std::shared_ptr<ProgressBoard>& board() const noexcept { return board_; }

  // Runs `call` with the communicator while no one can abort it, then
  // waits (at most until `deadline`) while NCCL reports ncclInProgress.
  // Throws the group's error if it has failed, or fails it (and throws)
  // when `call` returns an error or the deadline passes.
  void enqueue(const std::string& label, Clock::time_point deadline,
               const std::function<ncclResult_t(ncclComm_t)>& call);

  // Starts an operation without waiting for peers: runs `call` and watches
  // `event` until the operation completes, failing the group past
  // `deadline`. While NCCL still reports ncclInProgress (the first
  // operation on a communicator connects to its peers, and that needs them
  // to post theirs) the call returns at once; the event is recorded when
  // NCCL is done enqueuing, seen by poll() or by the next call on the
  // group, which waits for it as NCCL requires.
  // `seq` is the collective's number on the group (0 for a send or a
  // receive), for the progress board.
  void start(const std::string& label, Clock::time_point deadline,
             const std::function<ncclResult_t(ncclComm_t)>& call,
             const std::shared_ptr<Event>& event, uint64_t seq = 0);

  // Looks at the pending operations and NCCL's asynchronous error; fails the
  // group when one is late or NCCL reports an error. Called by the watchdog
  // and by waiting work.
  void poll() noexcept;

  // The progress board, for a collective that has waited a quarter of its
  // timeout (at least 10 ms, at most 1 s): writes once that this rank is
  // in it, then every such interval reads which ranks are not and whether
  // a rank aborted the group, failing it with that rank's reason. Called
  // by the watchdog, never under the group's lock (the store may block).
  void exchange_progress() noexcept;

  // Makes the group fail with `status` and `message` (the first failure
  // wins) and aborts the communicator. Safe from any thread.
  void fail(tessera_status status, const std::string& message) noexcept;

  // Throws the group's error if it has failed.
  void throw_if_failed() const;
  [[nodiscard]] bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

  // Splits take a number on their parent, the same on every rank.
  uint64_t next_split() noexcept { return ++splits_; }
  // Collectives and per-peer messages take a number on the group.
  uint64_t next_seq() noexcept { return ++seq_; }
  [[nodiscard]] uint64_t current_seq() const noexcept { return seq_; }
  uint64_t next_send(int32_t peer);
  uint64_t next_recv(int32_t peer);

  DeviceBuffer& scratch() noexcept { return scratch_; }
  DeviceBuffer& staged_send() noexcept { return staged_send_; }
  DeviceBuffer& staged_recv() noexcept { return staged_recv_; }

 private:
  struct Pending {
    std::shared_ptr<Event> event;
    std::string label;
    Clock::time_point start;
    Clock::time_point deadline;
    uint64_t seq = 0;  // collective number; 0 for point-to-point
  };
  // " (rank 1 never arrived)" when the board said so for collective `seq`.
  [[nodiscard]] std::string absent_locked(uint64_t seq) const;

  void abort_locked() noexcept;
  void fail_locked(tessera_status status, const std::string& message) noexcept;
  // Runs `call` and, unless `may_defer`, waits while NCCL reports
  // ncclInProgress; returns NCCL's state (ncclInProgress only when
  // deferred). Fails the group on an error or at `deadline`.
  ncclResult_t call_locked(std::unique_lock<std::mutex>& lock, const std::string& label,
                           Clock::time_point deadline,
                           const std::function<ncclResult_t(ncclComm_t)>& call, bool may_defer);
  // Waits (until `deadline`) for a deferred start to be enqueued and
  // records its event.
  void settle_locked(std::unique_lock<std::mutex>& lock, Clock::time_point deadline);
  // Records the deferred start's event once NCCL no longer reports
  // ncclInProgress (`state`); fails the group on an error.
  void finish_deferred_locked(ncclResult_t state) noexcept;

  std::string name_;
  std::string key_;
  std::shared_ptr<ProgressBoard> board_;
  int32_t rank_ = 0;
  int32_t size_ = 1;
  int32_t device_ = 0;
  cudaStream_t stream_ = nullptr;

  mutable std::mutex mu_;  // guards comm_, pending_, status_, message_
  ncclComm_t comm_ = nullptr;
  std::deque<Pending> pending_;
  std::shared_ptr<Event> deferred_;  // a started operation NCCL is still enqueuing
  std::atomic<bool> failed_{false};
  tessera_status status_ = TESSERA_OK;
  std::string message_;
  // The progress board's view of the collective that waits longest.
  uint64_t published_ = 0;  // the collective this rank said it waits in
  Clock::time_point looked_{};
  uint64_t absent_seq_ = 0;
  std::vector<int32_t> absent_;

  uint64_t splits_ = 0;
  uint64_t seq_ = 0;
  std::vector<uint64_t> sends_;
  std::vector<uint64_t> recvs_;
  DeviceBuffer scratch_;
  DeviceBuffer staged_send_;
  DeviceBuffer staged_recv_;
};

// A started operation: done when its event has completed.
class NcclWork final : public sdk::Work {
 public:
  NcclWork(std::shared_ptr<Group> group, std::shared_ptr<Event> event, std::string label)
      : group_(std::move(group)), event_(std::move(event)), label_(std::move(label)) {}
  void wait(int64_t timeout_ms) override;
  bool test() override;

 private:
  std::shared_ptr<Group> group_;
  std::shared_ptr<Event> event_;
  std::string label_;
  bool done_ = false;
};

// Polls every live group every `period` on its own thread.
class Watchdog {
 public:
  Watchdog(int32_t device, std::chrono::milliseconds period) : device_(device), period_(period) {}
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog();
  // Watches `group` while it lives; starts the thread on first use.
  void add(const std::shared_ptr<Group>& group);

 private:
  void loop();

  int32_t device_;
  std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::weak_ptr<Group>> groups_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::nccl_backend

// Ordered execution of one communicator's operations.
//
// Operations on a communicator take effect in posting order. A blocking
// operation posted while nothing is queued runs on the caller's thread; any
// other operation goes into a FIFO consumed by one worker thread per
// communicator, started on first use. A blocking operation posted behind
// queued ones waits for its turn.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "mailbox.hpp"
#include "signal.hpp"
#include "tessera/c/backend.h"

namespace tessera::inmemory {

class Group;

// One posted operation.
struct Task {
  enum class Kind { kOp, kSplit };
  Kind kind = Kind::kOp;
  tessera_coll_args args{};  // kOp
  int32_t color = 0;         // kSplit
  int32_t key = 0;           // kSplit
  std::shared_ptr<Completion> done = std::make_shared<Completion>();

  // Result of a split: written before `done` completes.
  std::shared_ptr<Group> split_group;
  int32_t split_rank = -1;

  // A receive, once posted to the mailbox (its `done` is this task's).
  void set_request(std::shared_ptr<RecvRequest> request);
  [[nodiscard]] std::shared_ptr<RecvRequest> request() const;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<RecvRequest> request_;
};

// The FIFO of one communicator and its lazily started worker thread.
class Executor {
 public:
  // Runs a task on the executing thread. Returns true when the task is
  // complete, false when it completes by itself later (a posted receive).
  // Exceptions become the task's failure.
  using Runner = std::function<bool(Task&)>;

  explicit Executor(Runner runner) : runner_(std::move(runner)) {}
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  // Calls shutdown().
  ~Executor();

  // True when no task is queued or running, so the caller may run the next
  // operation itself.
  [[nodiscard]] bool idle() const;
  // Number of tasks queued or running.
  [[nodiscard]] size_t pending() const;
  // Appends `task`, starting the worker thread if needed. Throws
  // Error(INTERNAL) and queues nothing when the thread cannot start.
  void submit(std::shared_ptr<Task> task);
  // Runs `task` now on this thread, recording its outcome in task.done.
  void run(Task& task) const noexcept;
  // Lets the worker finish every queued task, then joins it.
  void shutdown() noexcept;

 private:
  struct Outcome {
    bool complete = true;
    tessera_status status = TESSERA_OK;
    std::string message;
  };
  // Runs the task, turning exceptions into its failure.
  [[nodiscard]] Outcome execute(Task& task) const noexcept;
  void loop();

  Runner runner_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  size_t running_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace tessera::inmemory

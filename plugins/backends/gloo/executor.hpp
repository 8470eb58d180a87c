// Threads that run a communicator's operations off the caller's thread.
//
// gloo's calls are synchronous. A communicator's collectives run in posting
// order: a blocking one posted while nothing is queued runs on the caller's
// thread (no hand-off, no allocation); everything else goes to a FIFO
// served by one worker thread, started on first use. Non-blocking sends and
// receives are handed to gloo at once by the caller and only waited for on
// a pool thread, one per outstanding operation, reused once idle, so that a
// receive waiting for its message never holds up anything else.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::gloo_backend {

// A unit of work; it handles its own exceptions.
using Job = std::function<void()>;

// A thread running `fn`. Throws Error(INTERNAL) "gloo: cannot start <what>:
// <reason>" when the system refuses one.
std::thread start_thread(std::function<void()> fn, const char* what);

// One worker thread running jobs in FIFO order.
class Executor {
 public:
  Executor() = default;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  ~Executor() { shutdown(); }

  // True when no job is queued or running: the caller may run the next
  // operation itself without overtaking one.
  [[nodiscard]] bool idle() const noexcept { return pending_.load(std::memory_order_acquire) == 0; }
  // Jobs queued or running.
  [[nodiscard]] size_t pending() const noexcept { return pending_.load(); }
  // Appends `job`, starting the worker if needed. When the worker cannot
  // start, throws (see start_thread) and queues nothing.
  void submit(Job job);
  // Lets the worker finish the queued jobs, then joins it.
  void shutdown() noexcept;

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::atomic<size_t> pending_{0};
  std::thread worker_;
};

// Threads that each run one job at a time, as many as jobs run at once.
class WaiterPool {
 public:
  WaiterPool() = default;
  WaiterPool(const WaiterPool&) = delete;
  WaiterPool& operator=(const WaiterPool&) = delete;
  ~WaiterPool() { shutdown(); }

  // Runs `job` on an idle thread, or on a new one if none is idle. When no
  // thread can start, throws (see start_thread) and queues nothing.
  void run(Job job);
  // Jobs not finished yet.
  [[nodiscard]] size_t busy() const noexcept { return busy_.load(); }
  // Waits for the running jobs to finish, then joins every thread.
  void shutdown() noexcept;

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  size_t idle_ = 0;
  bool stopping_ = false;
  std::atomic<size_t> busy_{0};
  std::vector<std::thread> threads_;
};

}  // namespace tessera::gloo_backend

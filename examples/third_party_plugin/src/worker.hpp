// The per-communicator worker thread of the example_threads backend.
//
// Every collective of a communicator, blocking or not, is queued to its
// worker and runs there in posting order; a blocking call simply waits for
// its task. Non-blocking collectives therefore make progress on their own
// (test() turns true without wait()), and a wait() that times out leaves the
// operation running so that it can be waited for again.
//
// A task keeps a status and a message, not an exception: std::exception_ptr
// (and so std::future) is not safe in a plugin whose C++ runtime differs
// from the host's (see "C++ runtime" in Tessera's docs/sdk.md).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <tessera/sdk/backend.hpp>

namespace example_threads {

// One queued operation and, once it ran, how it ended.
class Task {
 public:
  explicit Task(std::function<void()> body) : body_(std::move(body)) {}

  // Runs the body (on the worker thread) and records how it ended.
  void run() noexcept;
  // Waits until the task is done or `timeout_ms` (< 0: forever) passes;
  // returns true when done.
  bool wait_for(int64_t timeout_ms);
  // Throws tessera::Error with the task's failure, if any. Only when done.
  void rethrow() const;

 private:
  std::function<void()> body_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  tessera_status status_ = TESSERA_OK;
  std::string message_;
};

// A thread that runs queued tasks one after the other.
class Worker {
 public:
  Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // Lets the thread finish the tasks already queued, then joins it.
  ~Worker();

  // Queues a task running `body` and returns it; never blocks on it.
  std::shared_ptr<Task> push(std::function<void()> body);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

// The SDK's Work for a queued task; `what` names it in errors.
class TaskWork final : public tessera::sdk::Work {
 public:
  TaskWork(std::shared_ptr<Task> task, std::string what)
      : task_(std::move(task)), what_(std::move(what)) {}

  // Throws TIMEOUT if the task is still running after timeout_ms (>= 0),
  // else the task's failure, if any.
  void wait(int64_t timeout_ms) override;
  bool test() override;

 private:
  std::shared_ptr<Task> task_;
  std::string what_;
};

}  // namespace example_threads

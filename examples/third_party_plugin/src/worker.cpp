#include "worker.hpp"

#include <chrono>
#include <exception>
#include <new>
#include <utility>

#include <tessera/sdk/error.hpp>

namespace example_threads {

using tessera::Error;

void Task::run() noexcept {
  tessera_status status = TESSERA_OK;
  std::string message;
  try {
    body_();
  } catch (const Error& e) {
    status = e.status();
    message = e.what();
  } catch (const std::bad_alloc&) {
    status = TESSERA_ERR_OUT_OF_MEMORY;
    message = "example_threads: out of memory";
  } catch (const std::exception& e) {
    status = TESSERA_ERR_INTERNAL;
    message = e.what();
  } catch (...) {
    status = TESSERA_ERR_INTERNAL;
    message = "example_threads: unknown exception";
  }
  body_ = nullptr;  // drop what the body captured before anyone is woken
  const std::lock_guard<std::mutex> lock(mu_);
  status_ = status;
  message_ = std::move(message);
  done_ = true;
  cv_.notify_all();
}

bool Task::wait_for(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto done = [this] { return done_; };
  if (timeout_ms < 0) {
    cv_.wait(lock, done);
    return true;
  }
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), done);
}

void Task::rethrow() const {
  if (status_ != TESSERA_OK) throw Error(status_, message_);
}

Worker::Worker() : thread_([this] { loop(); }) {}

Worker::~Worker() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Task> Worker::push(std::function<void()> body) {
  auto task = std::make_shared<Task>(std::move(body));
  {
    const std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(task);
  }
  cv_.notify_all();
  return task;
}

void Worker::loop() {
  for (;;) {
    std::shared_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task->run();
  }
}

void TaskWork::wait(int64_t timeout_ms) {
  if (!task_->wait_for(timeout_ms)) {
    throw Error(TESSERA_ERR_TIMEOUT,
                what_ + ": still running after " + std::to_string(timeout_ms) + " ms");
  }
  task_->rethrow();
}

bool TaskWork::test() {
  if (!task_->wait_for(0)) return false;
  task_->rethrow();
  return true;
}

}  // namespace example_threads

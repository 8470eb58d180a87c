#include "executor.hpp"

#include <exception>
#include <new>
#include <system_error>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera::inmemory {

void Task::set_request(std::shared_ptr<RecvRequest> request) {
  const std::lock_guard<std::mutex> lock(mu_);
  request_ = std::move(request);
}

std::shared_ptr<RecvRequest> Task::request() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return request_;
}

Executor::~Executor() { shutdown(); }

bool Executor::idle() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && running_ == 0;
}

size_t Executor::pending() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + running_;
}

void Executor::submit(std::shared_ptr<Task> task) {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    // Started before the task is queued, so a refusal leaves nothing behind.
    if (!worker_.joinable()) {
      try {
        worker_ = std::thread([this] { loop(); });
      } catch (const std::system_error& e) {
        throw Error(TESSERA_ERR_INTERNAL,
                    detail::concat("inmemory: cannot start the thread that runs a communicator's "
                                   "queued operations: ",
                                   e.what(), " (the system's thread limit)"));
      }
    }
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

Executor::Outcome Executor::execute(Task& task) const noexcept {
  try {
    return Outcome{runner_(task), TESSERA_OK, std::string()};
  } catch (const Error& e) {
    return Outcome{true, e.status(), e.what()};
  } catch (const std::bad_alloc&) {
    return Outcome{true, TESSERA_ERR_OUT_OF_MEMORY, "inmemory: out of memory"};
  } catch (const std::exception& e) {
    return Outcome{true, TESSERA_ERR_INTERNAL, e.what()};
  } catch (...) {
    return Outcome{true, TESSERA_ERR_INTERNAL, "inmemory: unknown exception"};
  }
}

void Executor::run(Task& task) const noexcept {
  Outcome o = execute(task);
  if (o.complete) task.done->finish(o.status, std::move(o.message));
}

void Executor::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    std::shared_ptr<Task> task = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    Outcome o = execute(*task);
    lock.lock();
    --running_;
    // Completed only once it no longer counts as running, so a caller that
    // saw it complete finds the executor idle.
    if (o.complete) {
      lock.unlock();
      task->done->finish(o.status, std::move(o.message));
      lock.lock();
    }
  }
}

void Executor::shutdown() noexcept {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
}

}  // namespace tessera::inmemory

#include "executor.hpp"

#include <system_error>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera::gloo_backend {

std::thread start_thread(std::function<void()> fn, const char* what) {
  try {
    return std::thread(std::move(fn));
  } catch (const std::system_error& e) {
    throw Error(TESSERA_ERR_INTERNAL, detail::concat("gloo: cannot start ", what, ": ", e.what(),
                                                     " (the system's thread limit)"));
  }
}

void Executor::submit(Job job) {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (!worker_.joinable()) {
      worker_ = start_thread([this] { loop(); }, "the thread that runs a communicator's queue");
    }
    pending_.fetch_add(1, std::memory_order_acq_rel);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void Executor::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping with nothing left
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // release what the job holds before counting it done
    pending_.fetch_sub(1, std::memory_order_acq_rel);
    lock.lock();
  }
}

void Executor::shutdown() noexcept {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void WaiterPool::run(Job job) {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (idle_ < queue_.size() + 1) {
      threads_.reserve(threads_.size() + 1);  // so push_back cannot throw below
      threads_.push_back(
          start_thread([this] { loop(); }, "a thread that waits for a send or receive"));
      ++idle_;
    }
    busy_.fetch_add(1);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void WaiterPool::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    --idle_;
    lock.unlock();
    job();
    job = nullptr;
    busy_.fetch_sub(1);
    lock.lock();
    ++idle_;
  }
}

void WaiterPool::shutdown() noexcept {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace tessera::gloo_backend

#include "executor.hpp"

#include <utility>

namespace tessera::gloo_backend {

void Executor::submit(Job job) {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    pending_.fetch_add(1, std::memory_order_acq_rel);
    queue_.push_back(std::move(job));
    if (!worker_.joinable()) worker_ = std::thread([this] { loop(); });
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
  busy_.fetch_add(1);
  {
    const std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
    if (idle_ < queue_.size()) {
      threads_.emplace_back([this] { loop(); });
      ++idle_;
    }
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

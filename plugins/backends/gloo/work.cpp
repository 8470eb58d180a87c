#include "work.hpp"

#include <chrono>

namespace tessera::gloo_backend {

void Completion::finish(std::optional<Error> error) noexcept {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

bool Completion::wait(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout_ms < 0) {
    cv_.wait(lock, [&] { return done_; });
    return true;
  }
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return done_; });
}

bool Completion::done() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void Completion::rethrow() const {
  const std::lock_guard<std::mutex> lock(mu_);
  if (error_) throw *error_;
}

void TaskWork::wait(int64_t timeout_ms) {
  if (!completion_->wait(timeout_ms)) {
    throw Error(TESSERA_ERR_TIMEOUT,
                detail::concat(what_, " has not finished after waiting ", timeout_ms,
                               " ms; it is still running (wait again or test it later)"));
  }
  completion_->rethrow();
}

bool TaskWork::test() {
  if (!completion_->done()) return false;
  completion_->rethrow();
  return true;
}

}  // namespace tessera::gloo_backend

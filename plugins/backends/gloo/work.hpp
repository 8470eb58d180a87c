// Completion of a posted operation and the Work handle the host waits on.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "tessera/sdk/backend.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::gloo_backend {

// Set once by the thread that ran the operation; waited on by others.
class Completion {
 public:
  // Records the outcome (no error: success) and wakes every waiter.
  void finish(std::optional<Error> error) noexcept;
  // Waits until finished; timeout_ms < 0 waits without limit. Returns true
  // when finished.
  bool wait(int64_t timeout_ms);
  [[nodiscard]] bool done() const;
  // Throws the recorded error, if any. Call after the operation finished.
  void rethrow() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::optional<Error> error_;
};

// What post() returns for a non-blocking operation. Shares the completion
// with the thread running the operation, so it stays valid after its
// communicator is destroyed.
class TaskWork final : public sdk::Work {
 public:
  // `what` names the operation in a timeout message ("allreduce #3 on
  // group 'world'").
  TaskWork(std::shared_ptr<Completion> completion, std::string what)
      : completion_(std::move(completion)), what_(std::move(what)) {}

  // Waits for the operation and throws its error. timeout_ms < 0 waits as
  // long as the operation runs (each one ends by its own timeout);
  // timeout_ms >= 0 throws Error(TIMEOUT) if it is still running then, and
  // leaves it running.
  void wait(int64_t timeout_ms) override;
  // True when finished (throws its error); false while running.
  bool test() override;

 private:
  std::shared_ptr<Completion> completion_;
  std::string what_;
};

}  // namespace tessera::gloo_backend

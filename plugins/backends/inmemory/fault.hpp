// The failure state of a group: once broken (timeout, abort), a group stays
// broken and every operation on it fails with the reason that broke it.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <string_view>

#include "tessera/c/common.h"

namespace tessera::inmemory {

// Set-once failure record of a group; readable without a lock once set.
class Fault {
 public:
  Fault() = default;
  Fault(const Fault&) = delete;
  Fault& operator=(const Fault&) = delete;

  // Records the first failure; later calls change nothing and return false.
  bool set(tessera_status status, std::string reason);
  [[nodiscard]] bool is_set() const noexcept { return set_.load(std::memory_order_acquire); }
  // The status and reason of the first failure; only valid when is_set().
  [[nodiscard]] tessera_status status() const noexcept { return status_; }
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }

  // Throws Error(PEER_LOST, "<what> failed: the group is broken: <reason>").
  // Only valid when is_set().
  [[noreturn]] void throw_lost(std::string_view what) const;

 private:
  std::mutex mu_;
  std::atomic<bool> set_{false};
  tessera_status status_ = TESSERA_OK;
  std::string reason_;
};

}  // namespace tessera::inmemory

// Waiting without burning a core: a short spin, then a futex sleep.
//
// Ranks of the in-memory backend are threads that may outnumber the cores
// (4 ranks on 2 cores), so no wait spins for longer than the configured spin
// time; after that the thread sleeps on a futex until a notify() or its
// deadline. All data handed between threads travels through atomics with
// acquire/release ordering; the futex only puts threads to sleep.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "tessera/c/common.h"

namespace tessera::inmemory {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// A deadline `timeout_ms` from now; < 0 means never.
Deadline deadline_after(int64_t timeout_ms) noexcept;
// True when `d` is a real deadline (not "never").
inline bool has_deadline(Deadline d) noexcept { return d != Deadline::max(); }

// A wake-up channel: waiters sleep until notify() is called or a deadline
// passes. Many threads may wait and notify concurrently.
class Signal {
 public:
  Signal() = default;
  Signal(const Signal&) = delete;
  Signal& operator=(const Signal&) = delete;

  // Wakes every waiter so it re-checks its condition. Cheap (no system call)
  // when nobody sleeps.
  void notify() noexcept;

  // Returns true as soon as `ready()` is true, false once `deadline` has
  // passed with `ready()` still false. Spins for up to `spin` first.
  // `ready` must become true only together with a notify().
  template <typename Ready>
  bool wait(Ready&& ready, Deadline deadline, std::chrono::nanoseconds spin) {
    if (ready()) return true;
    if (spin.count() > 0 && spin_until(ready, spin)) return true;
    for (;;) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = epoch_.load(std::memory_order_seq_cst);
      if (ready()) {
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        return true;
      }
      const bool expired = !sleep(seen, deadline);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      if (ready()) return true;
      if (expired) return false;
    }
  }

 private:
  template <typename Ready>
  bool spin_until(Ready& ready, std::chrono::nanoseconds spin) {
    const Deadline stop = Clock::now() + spin;
    for (uint32_t i = 1;; ++i) {
      cpu_relax();
      if (ready()) return true;
      if ((i & 63U) == 0 && Clock::now() >= stop) return false;
    }
  }
  // Sleeps while the epoch still equals `seen`, at most until `deadline`
  // (and at most 100 ms per call). Returns false when `deadline` passed.
  bool sleep(uint32_t seen, Deadline deadline) noexcept;
  static void cpu_relax() noexcept;

  std::atomic<uint32_t> epoch_{0};
  std::atomic<uint32_t> sleepers_{0};
};

// The result of one operation, set once and awaited by others.
class Completion {
 public:
  Completion() = default;
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  // Records the outcome; only the first call has an effect. Returns whether
  // this call was the first.
  bool finish(tessera_status status, std::string message);
  [[nodiscard]] bool done() const noexcept { return state_.load(std::memory_order_acquire) == 2; }
  // Waits until done() or `deadline`; returns done().
  bool wait(Deadline deadline, std::chrono::nanoseconds spin);
  // After done(): throws tessera::Error with the recorded failure, if any.
  void rethrow() const;

 private:
  Signal signal_;
  std::atomic<uint32_t> state_{0};  // 0 pending, 1 being set, 2 done
  tessera_status status_ = TESSERA_OK;
  std::string message_;
};

}  // namespace tessera::inmemory

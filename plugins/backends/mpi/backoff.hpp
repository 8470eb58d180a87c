// Pacing of the polling loops that wait for MPI requests.
#pragma once

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace tessera::mpi {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// The deadline `timeout_ms` after `start`; Deadline::max() for timeout_ms < 0.
inline Deadline deadline_after(Clock::time_point start, int64_t timeout_ms) noexcept {
  return timeout_ms < 0 ? Deadline::max() : start + std::chrono::milliseconds(timeout_ms);
}

// Paces a loop that polls MPI (which only makes progress while it is being
// called): during the first `spin` of a wait it polls without pause; for the
// following `yield` it gives the core away after each poll (so ranks that
// share a core still progress); after that it sleeps between polls, from
// 50 us doubling up to `max_sleep`. Never fails.
class Backoff {
 public:
  Backoff(Clock::time_point start, std::chrono::nanoseconds spin, std::chrono::nanoseconds yield,
          std::chrono::microseconds max_sleep) noexcept
      : start_(start),
        spin_end_(start + spin),
        yield_end_(start + spin + yield),
        max_sleep_(max_sleep) {}

  // Pauses after a poll that found the wait unfinished; `now` is the time of
  // that poll.
  void pause(Clock::time_point now) {
    if (now < spin_end_) return;
    if (now < yield_end_) {
      sched_yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, max_sleep_);
  }

  // Time since the wait started.
  [[nodiscard]] Clock::duration waited(Clock::time_point now) const noexcept {
    return now - start_;
  }

 private:
  Clock::time_point start_;
  Clock::time_point spin_end_;
  Clock::time_point yield_end_;
  std::chrono::microseconds max_sleep_;
  std::chrono::microseconds sleep_{50};
};

}  // namespace tessera::mpi

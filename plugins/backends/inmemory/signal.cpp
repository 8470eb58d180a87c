#include "signal.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>
#include <thread>
#include <utility>

#include "tessera/sdk/error.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessera::inmemory {

namespace {

// The futex word behind a std::atomic<uint32_t> (same size and layout).
uint32_t* futex_word(std::atomic<uint32_t>& a) noexcept {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return reinterpret_cast<uint32_t*>(&a);  // NOLINT: futex needs the raw word
}

constexpr auto kMaxSleep = std::chrono::milliseconds(100);

}  // namespace

Deadline deadline_after(int64_t timeout_ms) noexcept {
  if (timeout_ms < 0) return Deadline::max();
  const auto now = Clock::now();
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::max() - now);
  if (timeout_ms >= room.count()) return Deadline::max();
  return now + std::chrono::milliseconds(timeout_ms);
}

void Signal::notify() noexcept {
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, futex_word(epoch_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }
}

bool Signal::sleep(uint32_t seen, Deadline deadline) noexcept {
  const auto now = Clock::now();
  if (now >= deadline) return false;
  const auto left = std::min<Clock::duration>(deadline - now, kMaxSleep);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  syscall(SYS_futex, futex_word(epoch_), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
  return Clock::now() < deadline;
}

void Signal::cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::this_thread::yield();
#endif
}

bool Completion::finish(tessera_status status, std::string message) {
  uint32_t expected = 0;
  if (!state_.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return false;
  status_ = status;
  message_ = std::move(message);
  state_.store(2, std::memory_order_release);
  signal_.notify();
  return true;
}

bool Completion::wait(Deadline deadline, std::chrono::nanoseconds spin) {
  return signal_.wait([this] { return done(); }, deadline, spin);
}

void Completion::rethrow() const {
  if (done() && status_ != TESSERA_OK) throw Error(status_, message_);
}

}  // namespace tessera::inmemory

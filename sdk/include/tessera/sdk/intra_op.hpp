// Intra-op parallelism for model kernels: one operation (a GEMM, an
// element-wise pass) split over the threads the host gives each rank
// (run.threads_per_rank, host ABI 1.4).
//
// The model adapter (model.hpp) sets the thread count from the host before
// every unit call (one value for the whole process, like the host's); a
// kernel then calls parallel_for(n, min_chunk, fn) and fn(begin, end) runs
// on contiguous chunks of [0, n). The chunks are a static partition that
// depends only on n, min_chunk and the thread count, never on timing, so a
// kernel whose chunks write disjoint outputs is repeatable at a fixed
// thread count. The caller runs chunk 0 itself; the others run on a pool of
// workers that the call takes from the library's idle pools (or starts) and
// hands back when done, so ranks running at once each have their own. The
// pools live as long as the library. No thread_local: a plugin's dynamic
// TLS outliving its dlclose trips up leak checkers.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "tessera/c/host.h"

namespace tessera::sdk::intra_op {
namespace detail {

// Threads of one operation (>= 1).
inline std::atomic<int>& thread_count() {
  static std::atomic<int> count{1};
  return count;
}

// threads − 1 workers; run() hands chunk i (1..workers) to worker i − 1 and
// runs chunk 0 on the caller, then waits for the others.
class Pool {
 public:
  explicit Pool(int workers) {
    threads_.reserve(static_cast<std::size_t>(workers));
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { work(i); });
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  [[nodiscard]] int workers() const noexcept { return static_cast<int>(threads_.size()); }

  // Runs chunk(c) for c in [0, chunks), chunks <= workers() + 1; rethrows
  // the first exception of any chunk after all have finished.
  void run(int chunks, const std::function<void(int)>& chunk) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      task_ = &chunk;
      active_ = chunks - 1;
      pending_ = chunks - 1;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    std::exception_ptr mine;
    try {
      chunk(0);
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work(int index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= active_) continue;
      const std::function<void(int)>* task = task_;
      lock.unlock();
      std::exception_ptr failed;
      try {
        (*task)(index + 1);
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed && !error_) error_ = failed;
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* task_ = nullptr;
  std::exception_ptr error_;
  uint64_t generation_ = 0;
  int active_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

// The library's idle pools: a call takes one with the number of workers it
// needs (or starts one) and gives it back when done.
class Pools {
 public:
  std::unique_ptr<Pool> take(int workers) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        if ((*it)->workers() == workers) {
          std::unique_ptr<Pool> p = std::move(*it);
          idle_.erase(it);
          return p;
        }
      }
    }
    return std::make_unique<Pool>(workers);
  }
  void give_back(std::unique_ptr<Pool> p) {
    const std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(std::move(p));
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Pool>> idle_;
};

inline Pools& pools() {
  static Pools p;
  return p;
}

// A pool taken for one parallel_for, given back at the end of the scope.
class TakenPool {
 public:
  explicit TakenPool(int workers) : pool_(pools().take(workers)) {}
  TakenPool(const TakenPool&) = delete;
  TakenPool& operator=(const TakenPool&) = delete;
  ~TakenPool() { pools().give_back(std::move(pool_)); }
  Pool& operator*() const noexcept { return *pool_; }

 private:
  std::unique_ptr<Pool> pool_;
};

}  // namespace detail

// Threads one operation may use (>= 1).
inline int threads() noexcept { return detail::thread_count().load(std::memory_order_relaxed); }

// Sets the thread count of every operation of this library (values below 1
// count as 1).
inline void set_threads(int count) noexcept {
  detail::thread_count().store(std::max(count, 1), std::memory_order_relaxed);
}

// The thread count the host gives the calling rank: host ABI 1.4's
// intra_op_threads, 1 from an older host.
inline int host_threads(const tessera_host_api* host) noexcept {
  if (host == nullptr ||
      host->struct_size <
          offsetof(tessera_host_api, intra_op_threads) + sizeof(host->intra_op_threads) ||
      host->intra_op_threads == nullptr) {
    return 1;
  }
  return std::max(host->intra_op_threads(host->ctx), 1);
}

// How many chunks parallel_for(n, min_chunk, ...) uses: at most threads(),
// each at least min_chunk long (one chunk when n < 2 · min_chunk).
inline int chunks_for(int64_t n, int64_t min_chunk) noexcept {
  const int64_t by_size = n / std::max<int64_t>(min_chunk, 1);
  return static_cast<int>(std::clamp<int64_t>(by_size, 1, threads()));
}

// Calls fn(begin, end) on the chunks [n·c/k, n·(c+1)/k) of [0, n) for c in
// [0, k), k = chunks_for(n, min_chunk), in parallel; returns when all are
// done. The first exception of a chunk is rethrown.
template <class Fn>
void parallel_for(int64_t n, int64_t min_chunk, Fn&& fn) {
  if (n <= 0) return;
  const int k = chunks_for(n, min_chunk);
  if (k == 1) {
    fn(int64_t{0}, n);
    return;
  }
  const std::function<void(int)> chunk = [&](int c) { fn(n * c / k, n * (c + 1) / k); };
  const detail::TakenPool pool(k - 1);
  (*pool).run(k, chunk);
}

// Sets the thread count for one scope and restores the previous count at
// its end (tests; the count is the library's, not the calling thread's).
class ThreadsScope {
 public:
  explicit ThreadsScope(int count) noexcept : previous_(threads()) { set_threads(count); }
  ThreadsScope(const ThreadsScope&) = delete;
  ThreadsScope& operator=(const ThreadsScope&) = delete;
  ~ThreadsScope() { set_threads(previous_); }

 private:
  int previous_;
};

}  // namespace tessera::sdk::intra_op

#include "tessera/core/memory.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

namespace tessera {
// Not in the anonymous namespace: MemoryTracker::Impl, which has external
// linkage, holds these.
namespace memory_detail {

// Counters of one rank (or of the unranked slot). Aligned so that ranks
// updating their own slot from different threads do not share cache lines.
struct alignas(64) Slot {
  std::array<std::atomic<int64_t>, TESSERA_MEM_CATEGORY_COUNT> current{};
  std::array<std::atomic<int64_t>, TESSERA_MEM_CATEGORY_COUNT> peak{};
  std::atomic<int64_t> total_current{0};
  std::atomic<int64_t> total_peak{0};

  void clear() noexcept {
    for (auto& c : current) c.store(0, std::memory_order_relaxed);
    for (auto& p : peak) p.store(0, std::memory_order_relaxed);
    total_current.store(0, std::memory_order_relaxed);
    total_peak.store(0, std::memory_order_relaxed);
  }
};

}  // namespace memory_detail
namespace {

using Slot = memory_detail::Slot;

// Raises `peak` to `value` if it is larger (compare-and-swap loop).
void raise_peak(std::atomic<int64_t>& peak, int64_t value) noexcept {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

// Slot 0 is the unranked slot; slot 1 + r belongs to rank r. Arrays are only
// ever replaced by larger ones and kept alive until exit, so an add that
// races with reset never touches freed memory.
struct MemoryTracker::Impl {
  std::atomic<Slot*> slots{nullptr};
  std::atomic<int> ranks{0};
  std::atomic<int> only{-1};                    // reset's process_rank
  std::mutex reset_mutex;                       // serialises reset()
  std::vector<std::unique_ptr<Slot[]>> arrays;  // every array handed out
  size_t capacity = 0;                          // slots in the newest array
};

MemoryTracker& MemoryTracker::instance() {
  // Never destroyed: plugins may report frees while the process exits.
  static MemoryTracker* const tracker = new MemoryTracker();
  return *tracker;
}

MemoryTracker::MemoryTracker() : impl_(new Impl()) { reset(1); }

void MemoryTracker::reset(int max_ranks, int process_rank) {
  const int ranks = std::max(max_ranks, 0);
  impl_->only.store(process_rank >= 0 && process_rank < ranks ? process_rank : -1,
                    std::memory_order_release);
  const size_t needed = static_cast<size_t>(ranks) + 1;
  const std::lock_guard lock(impl_->reset_mutex);
  if (needed > impl_->capacity) {
    // Publish the new array before the larger rank count, so a reader that
    // sees the new count also sees the new array.
    impl_->arrays.push_back(std::make_unique<Slot[]>(needed));
    impl_->capacity = needed;
    impl_->slots.store(impl_->arrays.back().get(), std::memory_order_release);
  } else {
    Slot* slots = impl_->slots.load(std::memory_order_relaxed);
    for (size_t i = 0; i < impl_->capacity; ++i) slots[i].clear();
  }
  impl_->ranks.store(ranks, std::memory_order_release);
}

void MemoryTracker::add(int rank, tessera_mem_category category, int64_t delta_bytes) noexcept {
  const int ranks = impl_->ranks.load(std::memory_order_acquire);
  Slot* slots = impl_->slots.load(std::memory_order_acquire);
  if (const int only = impl_->only.load(std::memory_order_relaxed); only >= 0 && rank >= 0) {
    rank = only;
  }
  Slot& slot = (rank >= 0 && rank < ranks) ? slots[rank + 1] : slots[0];
  const int index =
      (category >= 0 && category < TESSERA_MEM_CATEGORY_COUNT) ? category : TESSERA_MEM_OTHER;
  const int64_t now =
      slot.current[index].fetch_add(delta_bytes, std::memory_order_relaxed) + delta_bytes;
  raise_peak(slot.peak[index], now);
  const int64_t total =
      slot.total_current.fetch_add(delta_bytes, std::memory_order_relaxed) + delta_bytes;
  raise_peak(slot.total_peak, total);
}

MemoryStats MemoryTracker::stats(int rank) const {
  const int ranks = impl_->ranks.load(std::memory_order_acquire);
  const Slot* slots = impl_->slots.load(std::memory_order_acquire);
  const Slot& slot = (rank >= 0 && rank < ranks) ? slots[rank + 1] : slots[0];
  MemoryStats out;
  for (int i = 0; i < TESSERA_MEM_CATEGORY_COUNT; ++i) {
    out.current[i] = slot.current[i].load(std::memory_order_relaxed);
    out.peak[i] = slot.peak[i].load(std::memory_order_relaxed);
  }
  out.total_current = slot.total_current.load(std::memory_order_relaxed);
  out.total_peak = slot.total_peak.load(std::memory_order_relaxed);
  return out;
}

int MemoryTracker::ranks() const noexcept { return impl_->ranks.load(std::memory_order_acquire); }

const char* MemoryTracker::category_name(tessera_mem_category category) noexcept {
  switch (category) {
    case TESSERA_MEM_PARAMS:
      return "params";
    case TESSERA_MEM_GRADS:
      return "grads";
    case TESSERA_MEM_OPTIMIZER:
      return "optimizer";
    case TESSERA_MEM_COMM:
      return "comm";
    case TESSERA_MEM_ACTIVATIONS:
      return "activations";
    case TESSERA_MEM_OTHER:
      return "other";
    default:
      return "unknown";
  }
}

}  // namespace tessera

// A zero-initialised array whose bytes are reported to the host's memory
// accounting (tessera_host_api::mem_track) for one rank and category, from
// allocation to release. Strategies keep parameters, gradients, staging
// buffers and shards in these so `tessera train` can print what each rank
// holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "tessera/c/host.h"
#include "tessera/sdk/host.hpp"

namespace tessera::sdk {

// Owns `size()` elements of T (value-initialised: zero for arithmetic types
// and for tessera::half / tessera::bfloat16). Every change of the allocation
// is reported as a delta of `capacity * sizeof(T)` bytes to the host for
// (rank, category); destruction reports the release. Movable, not copyable.
// Allocation failure throws std::bad_alloc (the SDK's forwarders turn it
// into TESSERA_ERR_OUT_OF_MEMORY) and leaves the accounting unchanged.
template <typename T>
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  // `count` zeroed elements for `rank` (a world rank, or TESSERA_RANK_UNKNOWN
  // for the calling thread's rank) in `category`.
  TrackedBuffer(const Host& host, int32_t rank, tessera_mem_category category, size_t count = 0)
      : host_(host.raw()), rank_(rank), category_(category) {
    resize(count);
  }
  TrackedBuffer(TrackedBuffer&& o) noexcept
      : host_(o.host_),
        rank_(o.rank_),
        category_(o.category_),
        values_(std::move(o.values_)),
        tracked_(std::exchange(o.tracked_, 0)) {
    o.values_.clear();
  }
  TrackedBuffer& operator=(TrackedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      host_ = o.host_;
      rank_ = o.rank_;
      category_ = o.category_;
      values_ = std::move(o.values_);
      o.values_.clear();
      tracked_ = std::exchange(o.tracked_, 0);
    }
    return *this;
  }
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;
  ~TrackedBuffer() { release(); }

  // Sets the length to `count`; kept elements keep their values, new ones
  // are zero. Shrinking returns the memory (and reports it).
  void resize(size_t count) {
    if (count == values_.size()) return;
    if (count < values_.size()) {
      std::vector<T> smaller(values_.begin(), values_.begin() + static_cast<std::ptrdiff_t>(count));
      values_.swap(smaller);
    } else {
      values_.reserve(count);  // exactly `count`: what is reported is what is needed
      values_.resize(count);
    }
    report();
  }
  // Frees everything and reports the release; the buffer becomes empty.
  void release() noexcept {
    std::vector<T>().swap(values_);
    report();
  }
  // Sets every element to zero (keeps the allocation).
  void zero() noexcept {
    for (T& v : values_) v = T{};
  }

  [[nodiscard]] T* data() noexcept { return values_.data(); }
  [[nodiscard]] const T* data() const noexcept { return values_.data(); }
  [[nodiscard]] size_t size() const noexcept { return values_.size(); }
  [[nodiscard]] bool empty() const noexcept { return values_.empty(); }
  // Bytes currently reported to the host.
  [[nodiscard]] int64_t tracked_bytes() const noexcept { return tracked_; }
  [[nodiscard]] std::span<T> span() noexcept { return {values_.data(), values_.size()}; }
  [[nodiscard]] std::span<const T> span() const noexcept {
    return {values_.data(), values_.size()};
  }
  T& operator[](size_t i) noexcept { return values_[i]; }
  const T& operator[](size_t i) const noexcept { return values_[i]; }

 private:
  // Brings the host's count in line with the current capacity.
  void report() noexcept {
    const auto now = static_cast<int64_t>(values_.capacity() * sizeof(T));
    if (now != tracked_ && host_ != nullptr) {
      host_->mem_track(host_->ctx, rank_, category_, now - tracked_);
    }
    tracked_ = now;
  }

  const tessera_host_api* host_ = nullptr;
  int32_t rank_ = TESSERA_RANK_UNKNOWN;
  tessera_mem_category category_ = TESSERA_MEM_OTHER;
  std::vector<T> values_;
  int64_t tracked_ = 0;  // bytes reported and not yet released
};

}  // namespace tessera::sdk

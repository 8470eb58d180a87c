// A zero-initialised array whose bytes are reported to the host's memory
// accounting (tessera_host_api::mem_track) for one rank and category, from
// allocation to release. Strategies keep parameters, gradients, staging
// buffers and shards in these so `tessera train` can print what each rank
// holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/c/host.h"
#include "tessera/sdk/host.hpp"

namespace tessera::sdk {

// Allocates what a rank's compute device reads in place: on a run whose
// compute device is not the CPU, through the host's mem_alloc (host ABI
// 1.5; CUDA managed memory, so kernels use the buffer where it is and host
// code still reads and writes it); otherwise, and without a host, with
// ordinary new. Decided once, when the allocator is made.
template <typename T>
class ComputeAllocator {
 public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  ComputeAllocator() noexcept = default;
  explicit ComputeAllocator(const tessera_host_api* host) noexcept
      : host_(Host(host).compute_device().type != TESSERA_DEVICE_CPU ? host : nullptr) {}
  template <typename U>
  ComputeAllocator(
      const ComputeAllocator<U>& other) noexcept  // NOLINT(google-explicit-constructor)
      : host_(other.host()) {}

  [[nodiscard]] T* allocate(size_t n) {
    if (host_ == nullptr) return std::allocator<T>().allocate(n);
    void* p = host_->mem_alloc(host_->ctx, static_cast<uint64_t>(n * sizeof(T)));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (host_ == nullptr) {
      std::allocator<T>().deallocate(p, n);
    } else {
      host_->mem_free(host_->ctx, p, static_cast<uint64_t>(n * sizeof(T)));
    }
  }
  // The host that allocates, or null for ordinary memory.
  [[nodiscard]] const tessera_host_api* host() const noexcept { return host_; }

  template <typename U>
  friend bool operator==(const ComputeAllocator& a, const ComputeAllocator<U>& b) noexcept {
    return a.host() == b.host();
  }

 private:
  const tessera_host_api* host_ = nullptr;
};

// Owns `size()` elements of T (value-initialised: zero for arithmetic types
// and for tessera::half / tessera::bfloat16), in memory the rank's compute
// device reads in place (ComputeAllocator). Every change of the allocation
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
      : host_(host.raw()),
        rank_(rank),
        category_(category),
        values_(ComputeAllocator<T>(host.raw())) {
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
      Values smaller(values_.begin(), values_.begin() + static_cast<std::ptrdiff_t>(count),
                     values_.get_allocator());
      values_.swap(smaller);
    } else {
      values_.reserve(count);  // exactly `count`: what is reported is what is needed
      values_.resize(count);
    }
    report();
  }
  // Frees everything and reports the release; the buffer becomes empty.
  void release() noexcept {
    Values(values_.get_allocator()).swap(values_);
    report();
  }
  // Sets every element to zero (keeps the allocation); f32 memory of a
  // compute device is zeroed there (Host::fill), so it stays on the device.
  // Throws tessera::Error only when the host's pass fails.
  void zero() {
    if constexpr (std::is_same_v<T, float>) {
      if (values_.get_allocator().host() != nullptr) {
        Host(host_).fill(span(), 0.0F);
        return;
      }
    }
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

  using Values = std::vector<T, ComputeAllocator<T>>;

  const tessera_host_api* host_ = nullptr;
  int32_t rank_ = TESSERA_RANK_UNKNOWN;
  tessera_mem_category category_ = TESSERA_MEM_OTHER;
  Values values_;
  int64_t tracked_ = 0;  // bytes reported and not yet released
};

}  // namespace tessera::sdk

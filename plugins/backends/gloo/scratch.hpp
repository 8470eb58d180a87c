// A grow-only staging buffer, accounted to the host as TESSERA_MEM_COMM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tessera/sdk/host.hpp"

namespace tessera::gloo_backend {

// Scratch memory of one communicator: staging copies for overlapping send
// and recv buffers, the full-size output gloo's reduce needs on every rank,
// reduce_scatter's working copy. Used by one operation at a time.
class Scratch {
 public:
  Scratch(const sdk::Host& host, int32_t rank) : host_(host), rank_(rank) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { release(); }

  // At least `bytes` bytes, 64-byte aligned, valid until the next call or
  // release(). Contents are unspecified. Throws std::bad_alloc.
  void* get(size_t bytes) {
    if (bytes > capacity_) {
      release();
      const size_t rounded = (bytes + 63) & ~size_t{63};
      data_.reset(static_cast<std::byte*>(::operator new (rounded, std::align_val_t{64})));
      capacity_ = rounded;
      host_.track_memory(rank_, TESSERA_MEM_COMM, static_cast<int64_t>(capacity_));
    }
    return data_.get();
  }

  // Frees the memory.
  void release() noexcept {
    if (capacity_ == 0) return;
    data_.reset();
    host_.track_memory(rank_, TESSERA_MEM_COMM, -static_cast<int64_t>(capacity_));
    capacity_ = 0;
  }

 private:
  struct AlignedDelete {
    void operator()(std::byte* p) const noexcept { ::operator delete (p, std::align_val_t{64}); }
  };
  sdk::Host host_;
  int32_t rank_;
  std::unique_ptr<std::byte, AlignedDelete> data_;
  size_t capacity_ = 0;
};

}  // namespace tessera::gloo_backend

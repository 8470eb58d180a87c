// A heap buffer of raw bytes aligned to a cache line, for benchmark data.
#pragma once

#include <cstddef>
#include <cstring>
#include <new>

namespace tessera::cli {

// Owns `size` bytes aligned to 64. Allocation failure throws std::bad_alloc.
// The memory is not initialised; touch() writes every byte so the pages are
// mapped before anything is timed.
class AlignedBuffer {
 public:
  static constexpr std::align_val_t kAlignment{64};

  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size)
      : data_(size == 0 ? nullptr : static_cast<std::byte*>(::operator new(size, kAlignment))),
        size_(size) {}
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& other) noexcept : data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
    other.size_ = 0;
  }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = other.data_;
      size_ = other.size_;
      other.data_ = nullptr;
      other.size_ = 0;
    }
    return *this;
  }
  ~AlignedBuffer() { release(); }

  [[nodiscard]] std::byte* data() noexcept { return data_; }
  [[nodiscard]] const std::byte* data() const noexcept { return data_; }
  [[nodiscard]] size_t size() const noexcept { return size_; }

  // Writes `value` to every byte.
  void touch(unsigned char value = 0) noexcept {
    if (data_ != nullptr) std::memset(data_, value, size_);
  }

 private:
  void release() noexcept {
    if (data_ != nullptr) ::operator delete(data_, kAlignment);
    data_ = nullptr;
  }
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessera::cli

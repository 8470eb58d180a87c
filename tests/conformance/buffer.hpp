// A host buffer of any ABI dtype, written and read through doubles, so one
// piece of case code covers every dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/c/common.h"

namespace tessera::conformance {

class TypedBuffer {
 public:
  // `count` elements of `dtype`, zero-filled. An empty buffer has a null data
  // pointer, which the ABI allows for count 0. Throws std::invalid_argument
  // for an unknown dtype.
  TypedBuffer(tessera_dtype dtype, uint64_t count);

  [[nodiscard]] tessera_dtype dtype() const noexcept { return dtype_; }
  [[nodiscard]] uint64_t count() const noexcept { return count_; }
  [[nodiscard]] size_t element_size() const noexcept { return element_size_; }

  // Stores `value` converted to the dtype (rounded to nearest for f16/bf16,
  // converted by static_cast for the others). Exact for small integers.
  void set(uint64_t index, double value);
  // Element `index` as a double (exact for every dtype except large i64).
  [[nodiscard]] double get(uint64_t index) const;
  // Sets every element to `value`.
  void fill(double value);

  // The raw bytes of the elements (empty for count 0).
  [[nodiscard]] std::span<std::byte> bytes() noexcept;
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept;

  // ABI view of the whole buffer, or of `count` elements from `offset`
  // (offset + count must not exceed count()).
  [[nodiscard]] tessera_buffer view() noexcept;
  [[nodiscard]] tessera_buffer view(uint64_t offset, uint64_t count) noexcept;

 private:
  tessera_dtype dtype_;
  uint64_t count_;
  size_t element_size_;
  std::vector<std::byte> storage_;
};

// A view with no elements and a null data pointer, for buffers an operation
// ignores on this rank (e.g. recv of reduce on a non-root).
tessera_buffer empty_buffer(tessera_dtype dtype) noexcept;

}  // namespace tessera::conformance

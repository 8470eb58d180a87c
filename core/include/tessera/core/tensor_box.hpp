// N-d boxes of tensors, and moving elements between slices of one tensor
// whatever form each slice has: a flat range of the tensor's row-major
// elements, or a box (per dimension an offset and an extent). Checkpoint
// reads and writes (the sharded index, state sources, collected state) go
// through it, so a slice written in one form is read back in the other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

// A box of a tensor: in every dimension d the indices
// [offset[d], offset[d] + extent[d]). Its elements are taken in row-major
// order of the box (the last dimension fastest), so a column shard of a
// matrix is one box. A box of a 0-d tensor has no dimension and holds the
// tensor's one element.
struct TensorBox {
  std::vector<uint64_t> offset;
  std::vector<uint64_t> extent;

  [[nodiscard]] size_t ndim() const noexcept { return extent.size(); }
  // The product of the extents (1 without dimensions); exact for a box that
  // lies inside a shape whose element count fits 64 bits (box_problem).
  [[nodiscard]] uint64_t numel() const noexcept;
  friend bool operator==(const TensorBox&, const TensorBox&) = default;
};

// The box of a whole tensor of `shape`.
TensorBox whole_box(std::span<const uint64_t> shape);

// "[0:2, 3:5]": each dimension's half-open index range ("[]" for none).
std::string box_text(const TensorBox& box);
// "[4, 11)": the flat element range [offset, offset + count).
std::string range_text(uint64_t offset, uint64_t count);
// "[1, 3]": the coordinates of the element with flat index `flat` in a
// tensor of `shape` (flat < the element count).
std::string index_text(std::span<const uint64_t> shape, uint64_t flat);

// Why `box` is not a box of a tensor of `shape` (offsets and extents of
// different lengths, another number of dimensions, past the end of a
// dimension), or an empty string when it is one. The element count of
// `shape` must fit 64 bits.
std::string box_problem(const TensorBox& box, std::span<const uint64_t> shape);

// The non-empty flat range [offset, offset + count) of a tensor of `shape`
// as a box when it is one (whole rows, part of one row, the whole tensor,
// any range of a 1-d tensor, ...); nullopt otherwise and for an empty range.
// The range must lie inside the tensor.
std::optional<TensorBox> flat_range_as_box(std::span<const uint64_t> shape, uint64_t offset,
                                           uint64_t count);

// Where the elements of one slice of a tensor lie in the slice's buffer:
// boxes of the tensor (parts), each at a position of the buffer and holding
// its elements in row-major order of the box. A box slice is one part; a
// flat range is at most 2 * ndim - 1 parts, each contiguous in the tensor's
// flat order (the rest of a row, whole rows, the start of a row, and so on
// per dimension). An empty slice has no part.
class SliceLayout {
 public:
  struct Part {
    TensorBox box;
    uint64_t at = 0;  // position of the box's first element in the buffer
  };

  // The flat range [offset, offset + count), which must lie inside `shape`.
  static SliceLayout flat(std::span<const uint64_t> shape, uint64_t offset, uint64_t count);
  // `box`, which must be a box of `shape` (box_problem empty).
  static SliceLayout of_box(std::span<const uint64_t> shape, TensorBox box);
  // The whole tensor, in flat order.
  static SliceLayout whole(std::span<const uint64_t> shape);

  [[nodiscard]] bool is_box() const noexcept { return is_box_; }
  [[nodiscard]] const std::vector<uint64_t>& shape() const noexcept { return shape_; }
  [[nodiscard]] const std::vector<Part>& parts() const noexcept { return parts_; }
  // Elements in the slice (the length of its buffer).
  [[nodiscard]] uint64_t numel() const noexcept { return numel_; }
  // The flat index in the tensor of the slice's first element and one past
  // that of its last (0 and 0 when empty): every element lies in between.
  [[nodiscard]] uint64_t flat_begin() const noexcept { return flat_begin_; }
  [[nodiscard]] uint64_t flat_end() const noexcept { return flat_end_; }
  // The flat index in the tensor of element `pos` (< numel()) of the buffer.
  [[nodiscard]] uint64_t flat_index(uint64_t pos) const;
  // "[4, 11)" for a flat range, "[0:2, 3:5]" for a box.
  [[nodiscard]] std::string text() const;

 private:
  SliceLayout() = default;
  std::vector<uint64_t> shape_;
  std::vector<uint64_t> strides_;  // row-major strides of shape_
  std::vector<Part> parts_;        // by position in the buffer
  TensorBox empty_box_;            // an empty box (no part), for text()
  bool is_box_ = false;
  uint64_t offset_ = 0;  // of a flat range
  uint64_t numel_ = 0;
  uint64_t flat_begin_ = 0;
  uint64_t flat_end_ = 0;
};

// Calls fn(a_pos, b_pos, n) for every run of n elements that slices `a`
// and `b` of one tensor both hold: positions [a_pos, a_pos + n) of a's
// buffer and [b_pos, b_pos + n) of b's, consecutive in both. Nothing when
// they share no element. Exceptions of `fn` propagate.
void for_each_overlap(const SliceLayout& a, const SliceLayout& b,
                      const std::function<void(uint64_t, uint64_t, uint64_t)>& fn);

// Copies the elements both slices hold from `from` (laid out as `src`) to
// `to` (laid out as `dst`), `elem_size` bytes each; returns how many.
uint64_t copy_overlap(const SliceLayout& src, const std::byte* from, const SliceLayout& dst,
                      std::byte* to, size_t elem_size);

// The elements slices `a` and `b` both hold, for messages: a flat range
// ("elements [5, 6)") when both are flat ranges, a box ("elements
// [0:2, 3:4]") when both are boxes, else how many and the first of them
// ("3 elements from index [1, 2]", "1 element at index [0, 3]"). Empty
// when they share none.
std::string overlap_text(const SliceLayout& a, const SliceLayout& b);

// The flat element ranges a slice holds, as (first, count) in the order of
// its buffer: one per part for a flat range, one per run of the box that is
// contiguous in the tensor (e.g. one per row of a column shard).
std::vector<std::pair<uint64_t, uint64_t>> flat_runs(const SliceLayout& slice);

// The first flat element range [first, second) of a tensor of `numel`
// elements that none of `runs` (first, count) covers, up to the next
// covered element or the end; nullopt when they cover every element.
// Sorts `runs`.
std::optional<std::pair<uint64_t, uint64_t>> first_gap(
    std::vector<std::pair<uint64_t, uint64_t>>& runs, uint64_t numel);

}  // namespace tessera

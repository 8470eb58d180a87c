// N-d boxes of tensors and the copy of elements between slices (flat ranges
// or boxes) of one tensor.
#include "tessera/core/tensor_box.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string_view>

namespace tessera {
namespace {

// Row-major strides of `dims` (the last dimension 1).
std::vector<uint64_t> row_major_strides(std::span<const uint64_t> dims) {
  std::vector<uint64_t> strides(dims.size());
  uint64_t step = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    strides[d] = step;
    step *= dims[d];
  }
  return strides;
}

// The flat index of the element at `index` (one coordinate per dimension).
uint64_t flat_of(std::span<const uint64_t> index, std::span<const uint64_t> strides) {
  uint64_t flat = 0;
  for (size_t d = 0; d < index.size(); ++d) flat += index[d] * strides[d];
  return flat;
}

// "a:b" of one dimension, without wrapping around when a + n overflows.
std::string dim_range_text(uint64_t first, uint64_t n) {
  if (n > std::numeric_limits<uint64_t>::max() - first) {
    return std::to_string(first) + ":" + std::to_string(first) + "+" + std::to_string(n);
  }
  return std::to_string(first) + ":" + std::to_string(first + n);
}

// The box both boxes hold; nullopt when they share no element.
std::optional<TensorBox> box_intersection(const TensorBox& a, const TensorBox& b) {
  TensorBox both;
  both.offset.resize(a.ndim());
  both.extent.resize(a.ndim());
  for (size_t d = 0; d < a.ndim(); ++d) {
    const uint64_t lo = std::max(a.offset[d], b.offset[d]);
    const uint64_t hi = std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d]);
    if (lo >= hi) return std::nullopt;
    both.offset[d] = lo;
    both.extent[d] = hi - lo;
  }
  return both;
}

// for_each_overlap of one part of each slice.
void part_overlap(const SliceLayout::Part& a, const SliceLayout::Part& b,
                  const std::function<void(uint64_t, uint64_t, uint64_t)>& fn) {
  const size_t n = a.box.ndim();
  if (n == 0) {  // a 0-d tensor: both hold its one element
    fn(a.at, b.at, 1);
    return;
  }
  const std::optional<TensorBox> both = box_intersection(a.box, b.box);
  if (!both) return;
  const std::vector<uint64_t> sa = row_major_strides(a.box.extent);
  const std::vector<uint64_t> sb = row_major_strides(b.box.extent);
  // Dimensions k.. that the intersection spans whole in both boxes are
  // consecutive in both buffers: one run covers them.
  size_t k = n - 1;
  while (k > 0 && both->extent[k] == a.box.extent[k] && both->extent[k] == b.box.extent[k]) --k;
  uint64_t run = 1;
  for (size_t d = k; d < n; ++d) run *= both->extent[d];
  uint64_t pa = a.at;
  uint64_t pb = b.at;
  for (size_t d = 0; d < n; ++d) {
    pa += (both->offset[d] - a.box.offset[d]) * sa[d];
    pb += (both->offset[d] - b.box.offset[d]) * sb[d];
  }
  // An odometer over dimensions 0..k-1 of the intersection.
  std::vector<uint64_t> at(k, 0);
  for (;;) {
    fn(pa, pb, run);
    size_t d = k;
    for (;;) {
      if (d == 0) return;
      --d;
      ++at[d];
      pa += sa[d];
      pb += sb[d];
      if (at[d] < both->extent[d]) break;
      pa -= at[d] * sa[d];
      pb -= at[d] * sb[d];
      at[d] = 0;
    }
  }
}

}  // namespace

uint64_t TensorBox::numel() const noexcept {
  uint64_t n = 1;
  for (const uint64_t e : extent) n *= e;
  return n;
}

TensorBox whole_box(std::span<const uint64_t> shape) {
  TensorBox box;
  box.offset.assign(shape.size(), 0);
  box.extent.assign(shape.begin(), shape.end());
  return box;
}

std::string box_text(const TensorBox& box) {
  std::string text = "[";
  const size_t n = std::min(box.offset.size(), box.extent.size());
  for (size_t d = 0; d < n; ++d) {
    if (d > 0) text += ", ";
    text += dim_range_text(box.offset[d], box.extent[d]);
  }
  return text + "]";
}

std::string range_text(uint64_t offset, uint64_t count) {
  const std::string end = count > std::numeric_limits<uint64_t>::max() - offset
                              ? std::to_string(offset) + "+" + std::to_string(count)
                              : std::to_string(offset + count);
  return "[" + std::to_string(offset) + ", " + end + ")";
}

std::string index_text(std::span<const uint64_t> shape, uint64_t flat) {
  const std::vector<uint64_t> strides = row_major_strides(shape);
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d > 0) text += ", ";
    text += std::to_string(strides[d] == 0 ? 0 : flat / strides[d] % shape[d]);
  }
  return text + "]";
}

std::string box_problem(const TensorBox& box, std::span<const uint64_t> shape) {
  if (box.offset.size() != box.extent.size()) {
    return "box has " + std::to_string(box.offset.size()) + " offsets but " +
           std::to_string(box.extent.size()) + " extents";
  }
  if (box.ndim() != shape.size()) {
    return "box " + box_text(box) + " has " + std::to_string(box.ndim()) +
           " dimensions, the tensor " + std::to_string(shape.size());
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (box.offset[d] > shape[d] || box.extent[d] > shape[d] - box.offset[d]) {
      return "box " + box_text(box) + " runs past dimension " + std::to_string(d) + " of size " +
             std::to_string(shape[d]);
    }
  }
  return {};
}

std::optional<TensorBox> flat_range_as_box(std::span<const uint64_t> shape, uint64_t offset,
                                           uint64_t count) {
  const SliceLayout layout = SliceLayout::flat(shape, offset, count);
  if (layout.parts().size() != 1) return std::nullopt;
  return layout.parts().front().box;
}

SliceLayout SliceLayout::flat(std::span<const uint64_t> shape, uint64_t offset, uint64_t count) {
  SliceLayout s;
  s.shape_.assign(shape.begin(), shape.end());
  s.strides_ = row_major_strides(shape);
  s.offset_ = offset;
  s.numel_ = count;
  if (count == 0) return s;
  s.flat_begin_ = offset;
  s.flat_end_ = offset + count;
  const size_t n = shape.size();
  if (n == 0) {
    s.parts_.push_back(Part{TensorBox{}, 0});
    return s;
  }
  // Greedily the largest box starting at `pos` that is contiguous in flat
  // order: fixed leading coordinates, a range in one dimension k, whole
  // dimensions after k (whose coordinates at `pos` must be 0).
  uint64_t pos = offset;
  const uint64_t end = offset + count;
  std::vector<uint64_t> index(n);
  while (pos < end) {
    size_t last_nonzero = 0;
    for (size_t d = 0; d < n; ++d) {
      index[d] = pos / s.strides_[d] % shape[d];
      if (index[d] != 0) last_nonzero = d;
    }
    size_t k = last_nonzero;
    uint64_t m = 0;
    for (;; ++k) {
      m = std::min(shape[k] - index[k], (end - pos) / s.strides_[k]);
      if (m > 0) break;  // at the last dimension (stride 1) m >= 1
    }
    Part part;
    part.at = pos - offset;
    part.box.offset = index;
    part.box.extent.resize(n);
    for (size_t d = 0; d < n; ++d) part.box.extent[d] = d < k ? 1 : d == k ? m : shape[d];
    s.parts_.push_back(std::move(part));
    pos += m * s.strides_[k];
  }
  return s;
}

SliceLayout SliceLayout::of_box(std::span<const uint64_t> shape, TensorBox box) {
  SliceLayout s;
  s.shape_.assign(shape.begin(), shape.end());
  s.strides_ = row_major_strides(shape);
  s.is_box_ = true;
  s.numel_ = box.numel();
  if (s.numel_ > 0) {
    s.flat_begin_ = flat_of(box.offset, s.strides_);
    std::vector<uint64_t> last(box.ndim());
    for (size_t d = 0; d < box.ndim(); ++d) last[d] = box.offset[d] + box.extent[d] - 1;
    s.flat_end_ = flat_of(last, s.strides_) + 1;
    s.parts_.push_back(Part{std::move(box), 0});
  } else {
    s.empty_box_ = std::move(box);
  }
  return s;
}

SliceLayout SliceLayout::whole(std::span<const uint64_t> shape) {
  uint64_t numel = 1;
  for (const uint64_t d : shape) numel *= d;
  return flat(shape, 0, numel);
}

uint64_t SliceLayout::flat_index(uint64_t pos) const {
  const auto it = std::upper_bound(parts_.begin(), parts_.end(), pos,
                                   [](uint64_t p, const Part& part) { return p < part.at; });
  const Part& part = *(it - 1);
  const std::vector<uint64_t> inner = row_major_strides(part.box.extent);
  uint64_t rest = pos - part.at;
  uint64_t flat = 0;
  for (size_t d = 0; d < part.box.ndim(); ++d) {
    const uint64_t i = inner[d] == 0 ? 0 : rest / inner[d];
    rest -= i * inner[d];
    flat += (part.box.offset[d] + i) * strides_[d];
  }
  return flat;
}

std::string SliceLayout::text() const {
  if (!is_box_) return range_text(offset_, numel_);
  return box_text(parts_.empty() ? empty_box_ : parts_.front().box);
}

void for_each_overlap(const SliceLayout& a, const SliceLayout& b,
                      const std::function<void(uint64_t, uint64_t, uint64_t)>& fn) {
  if (a.numel() == 0 || b.numel() == 0) return;
  if (a.flat_end() <= b.flat_begin() || b.flat_end() <= a.flat_begin()) return;
  for (const SliceLayout::Part& pa : a.parts()) {
    for (const SliceLayout::Part& pb : b.parts()) part_overlap(pa, pb, fn);
  }
}

uint64_t copy_overlap(const SliceLayout& src, const std::byte* from, const SliceLayout& dst,
                      std::byte* to, size_t elem_size) {
  uint64_t copied = 0;
  for_each_overlap(src, dst, [&](uint64_t s, uint64_t d, uint64_t n) {
    std::memcpy(to + d * elem_size, from + s * elem_size, n * elem_size);
    copied += n;
  });
  return copied;
}

std::string overlap_text(const SliceLayout& a, const SliceLayout& b) {
  uint64_t count = 0;
  uint64_t first = std::numeric_limits<uint64_t>::max();
  for_each_overlap(a, b, [&](uint64_t pa, uint64_t, uint64_t n) {
    count += n;
    first = std::min(first, a.flat_index(pa));
  });
  if (count == 0) return {};
  if (!a.is_box() && !b.is_box()) {
    return "elements " + range_text(std::max(a.flat_begin(), b.flat_begin()), count);
  }
  if (a.is_box() && b.is_box()) {
    return "elements " + box_text(*box_intersection(a.parts().front().box, b.parts().front().box));
  }
  if (count == 1) return "1 element at index " + index_text(a.shape(), first);
  return std::to_string(count) + " elements from index " + index_text(a.shape(), first);
}

std::vector<std::pair<uint64_t, uint64_t>> flat_runs(const SliceLayout& slice) {
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  const SliceLayout all = SliceLayout::whole(slice.shape());
  for_each_overlap(slice, all,
                   [&](uint64_t, uint64_t flat, uint64_t n) { runs.emplace_back(flat, n); });
  return runs;
}

std::optional<std::pair<uint64_t, uint64_t>> first_gap(
    std::vector<std::pair<uint64_t, uint64_t>>& runs, uint64_t numel) {
  std::sort(runs.begin(), runs.end());
  uint64_t reached = 0;
  for (const auto& [first, n] : runs) {
    if (first > reached) return std::pair{reached, first};
    reached = std::max(reached, first + n);
  }
  if (reached < numel) return std::pair{reached, numel};
  return std::nullopt;
}

}  // namespace tessera

// Boxes and slice layouts: a flat range splits into boxes contiguous in flat
// order, copies between any two slices (flat ranges or boxes) of a tensor
// move exactly the elements both hold, checked against a brute-force
// enumeration over random shapes, ranges and boxes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tessera/core/tensor_box.hpp"

namespace tessera {
namespace {

using Shape = std::vector<uint64_t>;

uint64_t numel_of(const Shape& shape) {
  uint64_t n = 1;
  for (const uint64_t d : shape) n *= d;
  return n;
}

// The flat indices of a box's elements in row-major order of the box.
std::vector<uint64_t> box_elements(const Shape& shape, const TensorBox& box) {
  std::vector<uint64_t> out;
  if (box.numel() == 0) return out;
  std::vector<uint64_t> at(box.ndim(), 0);
  for (;;) {
    uint64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + box.offset[d] + at[d];
    out.push_back(flat);
    size_t d = box.ndim();
    for (;;) {
      if (d == 0) return out;
      --d;
      if (++at[d] < box.extent[d]) break;
      at[d] = 0;
    }
  }
}

std::vector<uint64_t> range_elements(uint64_t offset, uint64_t count) {
  std::vector<uint64_t> out(count);
  for (uint64_t i = 0; i < count; ++i) out[i] = offset + i;
  return out;
}

// A random slice of `shape`: its layout and the flat index of each element
// of its buffer.
struct RandomSlice {
  SliceLayout layout;
  std::vector<uint64_t> elements;
};

RandomSlice random_slice(const Shape& shape, std::mt19937& rng) {
  const uint64_t numel = numel_of(shape);
  if (rng() % 2 == 0) {
    const uint64_t a = rng() % (numel + 1);
    const uint64_t b = rng() % (numel + 1);
    const uint64_t lo = std::min(a, b);
    return {SliceLayout::flat(shape, lo, std::max(a, b) - lo),
            range_elements(lo, std::max(a, b) - lo)};
  }
  TensorBox box;
  for (const uint64_t d : shape) {
    const uint64_t a = rng() % (d + 1);
    const uint64_t b = rng() % (d + 1);
    box.offset.push_back(std::min(a, b));
    box.extent.push_back(std::max(a, b) - std::min(a, b));
  }
  std::vector<uint64_t> elements = box_elements(shape, box);
  return {SliceLayout::of_box(shape, box), std::move(elements)};
}

Shape random_shape(std::mt19937& rng) {
  Shape shape(rng() % 5);
  for (uint64_t& d : shape) d = rng() % 5;
  if (rng() % 4 != 0) {
    for (uint64_t& d : shape) d = d == 0 ? 1 : d;  // mostly non-empty tensors
  }
  return shape;
}

TEST(TensorBox, TextsAndProblems) {
  const TensorBox box{{0, 3}, {2, 2}};
  EXPECT_EQ(box_text(box), "[0:2, 3:5]");
  EXPECT_EQ(box.numel(), 4U);
  EXPECT_EQ(box_text(TensorBox{}), "[]");
  EXPECT_EQ(TensorBox{}.numel(), 1U);
  EXPECT_EQ(range_text(4, 7), "[4, 11)");
  EXPECT_EQ(index_text(Shape{3, 4}, 7), "[1, 3]");
  EXPECT_EQ(box_problem(box, Shape{2, 5}), "");
  EXPECT_EQ(box_problem(box, Shape{2, 4}), "box [0:2, 3:5] runs past dimension 1 of size 4");
  EXPECT_EQ(box_problem(box, Shape{10}), "box [0:2, 3:5] has 2 dimensions, the tensor 1");
  EXPECT_EQ(box_problem(TensorBox{{0}, {}}, Shape{}), "box has 1 offsets but 0 extents");
  EXPECT_EQ(box_problem(TensorBox{{UINT64_MAX}, {2}}, Shape{4}),
            "box [18446744073709551615:18446744073709551615+2] runs past dimension 0 of size 4");
  EXPECT_EQ(whole_box(Shape{2, 3}), (TensorBox{{0, 0}, {2, 3}}));
}

TEST(TensorBox, FlatRangesSplitIntoContiguousBoxes) {
  const Shape shape{4, 5};
  const SliceLayout layout = SliceLayout::flat(shape, 3, 14);  // [3, 17)
  ASSERT_EQ(layout.parts().size(), 3U);
  EXPECT_EQ(layout.parts()[0].box, (TensorBox{{0, 3}, {1, 2}}));
  EXPECT_EQ(layout.parts()[1].box, (TensorBox{{1, 0}, {2, 5}}));
  EXPECT_EQ(layout.parts()[2].box, (TensorBox{{3, 0}, {1, 2}}));
  EXPECT_EQ(layout.parts()[2].at, 12U);
  EXPECT_EQ(layout.text(), "[3, 17)");
  EXPECT_EQ(layout.flat_begin(), 3U);
  EXPECT_EQ(layout.flat_end(), 17U);
  EXPECT_EQ(layout.flat_index(13), 16U);

  // Which flat ranges are boxes.
  EXPECT_EQ(flat_range_as_box(shape, 5, 10), (TensorBox{{1, 0}, {2, 5}}));  // two whole rows
  EXPECT_EQ(flat_range_as_box(shape, 11, 3), (TensorBox{{2, 1}, {1, 3}}));  // part of a row
  EXPECT_EQ(flat_range_as_box(shape, 0, 20), whole_box(shape));
  EXPECT_EQ(flat_range_as_box(shape, 3, 14), std::nullopt);
  EXPECT_EQ(flat_range_as_box(shape, 4, 0), std::nullopt);
  EXPECT_EQ(flat_range_as_box(Shape{10}, 3, 4), (TensorBox{{3}, {4}}));
  EXPECT_EQ(flat_range_as_box(Shape{}, 0, 1), TensorBox{});
  EXPECT_EQ(flat_range_as_box(Shape{2, 3, 4}, 12, 12), (TensorBox{{1, 0, 0}, {1, 3, 4}}));
  EXPECT_EQ(flat_range_as_box(Shape{2, 3, 4}, 4, 8), (TensorBox{{0, 1, 0}, {1, 2, 4}}));
  EXPECT_EQ(flat_range_as_box(Shape{2, 3, 4}, 4, 12), std::nullopt);
}

TEST(TensorBox, ColumnShardIsOneRunPerRow) {
  const Shape shape{3, 6};
  const SliceLayout cols = SliceLayout::of_box(shape, TensorBox{{0, 2}, {3, 2}});
  EXPECT_EQ(cols.text(), "[0:3, 2:4]");
  EXPECT_EQ(flat_runs(cols), (std::vector<std::pair<uint64_t, uint64_t>>{{2, 2}, {8, 2}, {14, 2}}));
  // Row shards and the whole tensor are one run.
  EXPECT_EQ(flat_runs(SliceLayout::of_box(shape, TensorBox{{1, 0}, {2, 6}})),
            (std::vector<std::pair<uint64_t, uint64_t>>{{6, 12}}));
  EXPECT_EQ(flat_runs(SliceLayout::whole(shape)),
            (std::vector<std::pair<uint64_t, uint64_t>>{{0, 18}}));
  auto runs = flat_runs(cols);
  EXPECT_EQ(first_gap(runs, 18), (std::pair<uint64_t, uint64_t>{0, 2}));
  runs = {{0, 4}, {6, 12}, {4, 2}};
  EXPECT_EQ(first_gap(runs, 18), std::nullopt);
  runs = {{0, 4}, {4, 2}};
  EXPECT_EQ(first_gap(runs, 18), (std::pair<uint64_t, uint64_t>{6, 18}));

  // A column shard read from a flat range over the middle of the tensor.
  const SliceLayout middle = SliceLayout::flat(shape, 4, 9);  // [4, 13)
  EXPECT_EQ(overlap_text(cols, middle), "2 elements from index [1, 2]");
  EXPECT_EQ(overlap_text(SliceLayout::flat(shape, 0, 5), middle), "elements [4, 5)");
  EXPECT_EQ(overlap_text(cols, SliceLayout::of_box(shape, TensorBox{{1, 3}, {2, 3}})),
            "elements [1:3, 3:4]");
  EXPECT_EQ(overlap_text(cols, SliceLayout::of_box(shape, TensorBox{{0, 4}, {3, 2}})), "");
  EXPECT_EQ(overlap_text(cols, SliceLayout::flat(shape, 3, 2)), "1 element at index [0, 3]");
}

TEST(TensorBox, ZeroExtentAndScalarSlices) {
  const Shape shape{3, 4};
  const SliceLayout empty = SliceLayout::of_box(shape, TensorBox{{1, 2}, {2, 0}});
  EXPECT_EQ(empty.numel(), 0U);
  EXPECT_TRUE(empty.parts().empty());
  EXPECT_EQ(empty.text(), "[1:3, 2:2]");
  EXPECT_TRUE(flat_runs(empty).empty());
  EXPECT_EQ(overlap_text(empty, SliceLayout::whole(shape)), "");

  const Shape scalar{};
  const SliceLayout one = SliceLayout::of_box(scalar, TensorBox{});
  EXPECT_EQ(one.numel(), 1U);
  const float value = 2.5F;
  float out = 0;
  EXPECT_EQ(
      copy_overlap(one, reinterpret_cast<const std::byte*>(&value), SliceLayout::flat(scalar, 0, 1),
                   reinterpret_cast<std::byte*>(&out), sizeof(float)),
      1U);
  EXPECT_EQ(out, 2.5F);

  const Shape none{3, 0};
  EXPECT_EQ(SliceLayout::whole(none).numel(), 0U);
  EXPECT_EQ(box_problem(TensorBox{{3, 0}, {0, 0}}, none), "");
}

TEST(TensorBox, CopiesMatchBruteForceOverRandomSlices) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 3000; ++trial) {
    const Shape shape = random_shape(rng);
    const RandomSlice a = random_slice(shape, rng);
    const RandomSlice b = random_slice(shape, rng);
    ASSERT_EQ(a.layout.numel(), a.elements.size());
    // Element i of a's buffer holds its flat index; copy into b's buffer.
    std::vector<uint64_t> from(a.elements);
    std::vector<uint64_t> to(b.elements.size(), UINT64_MAX);
    const uint64_t copied =
        copy_overlap(a.layout, reinterpret_cast<const std::byte*>(from.data()), b.layout,
                     reinterpret_cast<std::byte*>(to.data()), sizeof(uint64_t));
    uint64_t expected = 0;
    for (size_t i = 0; i < b.elements.size(); ++i) {
      const bool in_a =
          std::find(a.elements.begin(), a.elements.end(), b.elements[i]) != a.elements.end();
      expected += in_a ? 1 : 0;
      ASSERT_EQ(to[i], in_a ? b.elements[i] : UINT64_MAX)
          << "trial " << trial << ": " << a.layout.text() << " -> " << b.layout.text();
    }
    ASSERT_EQ(copied, expected) << "trial " << trial;
    ASSERT_EQ(overlap_text(a.layout, b.layout).empty(), expected == 0) << "trial " << trial;

    for (size_t i = 0; i < a.elements.size(); ++i) {
      ASSERT_EQ(a.layout.flat_index(i), a.elements[i]) << "trial " << trial;
    }
    if (!a.elements.empty()) {
      ASSERT_EQ(a.layout.flat_begin(), *std::min_element(a.elements.begin(), a.elements.end()));
      ASSERT_EQ(a.layout.flat_end(), *std::max_element(a.elements.begin(), a.elements.end()) + 1);
    }
    // The runs hold the same elements, in buffer order.
    std::vector<uint64_t> from_runs;
    for (const auto& [first, n] : flat_runs(a.layout)) {
      for (uint64_t i = 0; i < n; ++i) from_runs.push_back(first + i);
    }
    ASSERT_EQ(from_runs, a.elements) << "trial " << trial;
    // A flat range is a box exactly when its elements are a box's.
    if (!a.layout.is_box() && !a.elements.empty()) {
      const auto box = flat_range_as_box(shape, a.layout.flat_begin(), a.layout.numel());
      if (box) {
        ASSERT_EQ(box_elements(shape, *box), a.elements) << "trial " << trial;
      } else {
        ASSERT_GT(a.layout.parts().size(), 1U) << "trial " << trial;
      }
    }
  }
}

}  // namespace
}  // namespace tessera

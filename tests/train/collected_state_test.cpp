// CollectedState and the C writer table: pieces (flat ranges and boxes, in
// any mix) reassemble into whole tensors, replicas that agree merge into one
// copy, replicas that differ are errors naming the tensor, the element and
// the ranks, gaps or repeated writes are reported, and bad boxes are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "support/error_of.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "tessera/sdk/error.hpp"
#include "train/train_util.hpp"

namespace tessera::train {
namespace {

using test::last_error;
using test::same_bits;
using test::thrown_error;

const std::vector<int64_t> kShape = {2, 5};

std::vector<float> iota(float start, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

CollectedState::Piece piece(uint64_t offset, std::vector<float> values, int rank) {
  return CollectedState::Piece{offset, std::move(values), rank};
}

// Writes elements [offset, offset + values.size()) of "w" through the C table.
tessera_status write(const tessera_state_writer& w, uint64_t offset,
                     const std::vector<float>& values, const char* name = "w") {
  const tessera_tensor_slice s{sizeof(tessera_tensor_slice),
                               2,
                               name,
                               kShape.data(),
                               offset,
                               values.size(),
                               nullptr,
                               nullptr};
  return w.write(w.ctx, &s, values.data());
}

// Writes box (`offset`, `extent`) of tensor `name` of `shape` through the C
// table; `count` defaults to the box's element count.
tessera_status write_box(const tessera_state_writer& w, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& offset, const std::vector<int64_t>& extent,
                         const std::vector<float>& values, const char* name = "w") {
  tessera_tensor_slice s{};
  s.struct_size = sizeof s;
  s.ndim = static_cast<int32_t>(shape.size());
  s.name = name;
  s.shape = shape.data();
  s.count = values.size();
  s.box_offset = offset.data();
  s.box_extent = extent.data();
  return w.write(w.ctx, &s, values.data());
}

// The values of box (`offset`, `extent`) of a tensor of `shape` whose
// element i is `i` (row-major order of the box).
std::vector<float> box_values(const std::vector<int64_t>& shape, const std::vector<int64_t>& offset,
                              const std::vector<int64_t>& extent) {
  std::vector<float> out;
  std::vector<int64_t> at(shape.size(), 0);
  int64_t n = 1;
  for (const int64_t e : extent) n *= e;
  for (int64_t i = 0; i < n; ++i) {
    int64_t flat = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + offset[d] + at[d];
    out.push_back(static_cast<float>(flat));
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++at[d] < extent[d]) break;
      at[d] = 0;
    }
  }
  return out;
}

CollectedState::Piece box_piece(std::vector<uint64_t> offset, std::vector<uint64_t> extent,
                                std::vector<float> values, int rank) {
  return CollectedState::Piece{0, std::move(values), rank,
                               TensorBox{std::move(offset), std::move(extent)}};
}

TEST(CollectedState, WriterPiecesReassembleWithRanks) {
  CollectedState state;
  const tessera_state_writer w = make_writer(state);
  EXPECT_EQ(w.flags, 0u);
  const std::vector<float> all = iota(1.0F, 10);
  {
    const ThreadRankGuard rank(3);
    ASSERT_EQ(write(w, 6, {all.begin() + 6, all.end()}), TESSERA_OK) << last_error();
    ASSERT_EQ(write(w, 0, {all.begin(), all.begin() + 6}), TESSERA_OK) << last_error();
  }
  ASSERT_EQ(state.tensors.size(), 1u);
  const auto& t = state.tensors.at("w");
  EXPECT_EQ(t.shape, kShape);
  ASSERT_EQ(t.pieces.size(), 2u);
  EXPECT_EQ(t.pieces[0].offset, 0u) << "pieces are kept sorted";
  EXPECT_EQ(t.pieces[0].rank, 3);
  EXPECT_TRUE(same_bits(state.full("w"), all));
}

TEST(CollectedState, MergeOfEqualReplicasKeepsOneCopy) {
  const std::vector<float> all = test::random_values(10, 7);
  CollectedState rank0;
  rank0.add("w", kShape, piece(0, all, 0));
  CollectedState rank1;
  rank1.add("w", kShape, piece(0, {all.begin(), all.begin() + 4}, 1));
  rank1.add("w", kShape, piece(4, {all.begin() + 4, all.end()}, 1));
  rank0.merge(std::move(rank1));
  EXPECT_EQ(rank0.tensors.at("w").pieces.size(), 1u) << "replicas take no extra memory";
  EXPECT_TRUE(same_bits(rank0.full("w"), all));
}

TEST(CollectedState, OverlappingShardsThatAgreeCombine) {
  // Hybrid layouts: ranks hold overlapping ranges of one tensor.
  const std::vector<float> all = iota(-3.0F, 10);
  CollectedState a;
  a.add("w", kShape, piece(0, {all.begin(), all.begin() + 6}, 0));
  CollectedState b;
  b.add("w", kShape, piece(4, {all.begin() + 4, all.end()}, 1));
  a.merge(std::move(b));
  EXPECT_TRUE(same_bits(a.full("w"), all));
}

TEST(CollectedState, DifferingReplicasNameTensorElementAndRanks) {
  std::vector<float> all = iota(0.5F, 10);
  CollectedState rank0;
  rank0.add("block0.w", kShape, piece(0, all, 0));
  all[7] = std::nextafter(all[7], 100.0F);  // one ulp apart
  CollectedState rank2;
  rank2.add("block0.w", kShape, piece(2, {all.begin() + 2, all.end()}, 2));
  const Error e = thrown_error([&] { rank0.merge(std::move(rank2)); });
  EXPECT_EQ(e.status(), TESSERA_ERR_MISMATCH);
  const std::string msg = e.what();
  EXPECT_NE(msg.find("tensor 'block0.w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("element 7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 holds 7.5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 2 holds"), std::string::npos) << msg;
}

TEST(CollectedState, SignedZerosAndUnknownRanksDiffer) {
  CollectedState a;
  a.add("w", kShape, piece(0, std::vector<float>(10, 0.0F), -1));
  std::vector<float> neg(10, 0.0F);
  neg[0] = -0.0F;
  CollectedState b;
  b.add("w", kShape, piece(0, neg, -1));
  const Error e = thrown_error([&] { a.merge(std::move(b)); });
  EXPECT_NE(std::string(e.what()).find("element 0"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("unknown"), std::string::npos) << e.what();
}

TEST(CollectedState, FullReportsGapsAndMissingTensors) {
  CollectedState state;
  state.add("w", kShape, piece(0, iota(0, 3), 0));
  state.add("w", kShape, piece(5, iota(5, 3), 1));
  Error e = thrown_error([&] { (void)state.full("w"); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.what()).find("tensor 'w' of shape [2, 5]: elements [3, 5)"),
            std::string::npos)
      << e.what();
  state.add("w", kShape, piece(3, iota(3, 2), 1));
  e = thrown_error([&] { (void)state.full("w"); });
  EXPECT_NE(std::string(e.what()).find("elements [8, 10) were not saved"), std::string::npos)
      << e.what();
  state.add("w", kShape, piece(8, iota(8, 2), 0));
  EXPECT_TRUE(same_bits(state.full("w"), iota(0, 10)));
  e = thrown_error([&] { (void)state.full("v"); });
  EXPECT_NE(std::string(e.what()).find("tensor 'v' was not saved"), std::string::npos) << e.what();
}

TEST(CollectedState, ShapeDisagreementAndRangeErrors) {
  CollectedState a;
  a.add("w", kShape, piece(0, iota(0, 10), 0));
  CollectedState b;
  b.add("w", std::vector<int64_t>{5, 2}, piece(0, iota(0, 10), 1));
  Error e = thrown_error([&] { a.merge(std::move(b)); });
  EXPECT_EQ(e.status(), TESSERA_ERR_MISMATCH);
  EXPECT_NE(std::string(e.what()).find("[5, 2] after shape [2, 5]"), std::string::npos) << e.what();
  e = thrown_error([&] { a.add("w", kShape, piece(8, iota(0, 3), 0)); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.what()).find("[8, 11) are outside"), std::string::npos) << e.what();
}

TEST(StateWriter, ExactlyOnceUnlessAllReplicas) {
  CollectedState once;
  const tessera_state_writer w = make_writer(once);
  ASSERT_EQ(write(w, 0, iota(0, 6)), TESSERA_OK) << last_error();
  EXPECT_EQ(write(w, 5, iota(5, 5)), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("state write: tensor 'w': elements [5, 6) written twice"),
            std::string::npos)
      << last_error();

  CollectedState replicas;
  const tessera_state_writer r = make_writer(replicas, TESSERA_STATE_ALL_REPLICAS);
  EXPECT_EQ(r.flags, uint32_t{TESSERA_STATE_ALL_REPLICAS});
  ASSERT_EQ(write(r, 0, iota(0, 10)), TESSERA_OK) << last_error();
  EXPECT_EQ(write(r, 2, iota(2, 4)), TESSERA_OK) << last_error();
  EXPECT_EQ(write(r, 2, iota(3, 4)), TESSERA_ERR_MISMATCH);
  EXPECT_NE(last_error().find("replicas differ at element 2"), std::string::npos) << last_error();
  EXPECT_TRUE(same_bits(replicas.full("w"), iota(0, 10)));
}

TEST(StateWriter, BadSlicesReturnStatusAndMessage) {
  CollectedState state;
  const tessera_state_writer w = make_writer(state);
  EXPECT_EQ(write(w, 9, iota(0, 2)), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("[9, 11) are outside its 10 elements"), std::string::npos)
      << last_error();
  const tessera_tensor_slice s{
      sizeof(tessera_tensor_slice), 2, "w", kShape.data(), 0, 3, nullptr, nullptr};
  EXPECT_EQ(w.write(w.ctx, &s, nullptr), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("data is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(w.write(w.ctx, nullptr, nullptr), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(state.tensors.empty());
}

TEST(CollectedState, ColumnShardsReassemble) {
  // A [3, 4] weight split by columns over two ranks: not one flat range each.
  const std::vector<int64_t> shape = {3, 4};
  CollectedState state;
  const tessera_state_writer w = make_writer(state);
  {
    const ThreadRankGuard rank(1);
    ASSERT_EQ(write_box(w, shape, {0, 2}, {3, 2}, box_values(shape, {0, 2}, {3, 2})), TESSERA_OK)
        << last_error();
  }
  {
    const ThreadRankGuard rank(0);
    ASSERT_EQ(write_box(w, shape, {0, 0}, {3, 2}, box_values(shape, {0, 0}, {3, 2})), TESSERA_OK)
        << last_error();
  }
  const auto& t = state.tensors.at("w");
  ASSERT_EQ(t.pieces.size(), 2u);
  EXPECT_EQ(t.pieces[0].rank, 0) << "sorted by first element";
  ASSERT_TRUE(t.pieces[0].box.has_value());
  EXPECT_EQ(*t.pieces[0].box, (TensorBox{{0, 0}, {3, 2}}));
  EXPECT_EQ(t.pieces[1].values, (std::vector<float>{2, 3, 6, 7, 10, 11}));
  EXPECT_TRUE(same_bits(state.full("w"), iota(0, 12)));
}

TEST(CollectedState, RowShardsAnd3dBoxes) {
  const std::vector<int64_t> rows = {4, 3};
  CollectedState state;
  const tessera_state_writer w = make_writer(state);
  ASSERT_EQ(write_box(w, rows, {0, 0}, {1, 3}, box_values(rows, {0, 0}, {1, 3}), "rows"),
            TESSERA_OK)
      << last_error();
  ASSERT_EQ(write_box(w, rows, {1, 0}, {3, 3}, box_values(rows, {1, 0}, {3, 3}), "rows"),
            TESSERA_OK)
      << last_error();
  EXPECT_TRUE(same_bits(state.full("rows"), iota(0, 12)));

  // A [2, 3, 4] tensor as four boxes: halves of dimension 0 times halves of
  // dimension 2.
  const std::vector<int64_t> cube = {2, 3, 4};
  for (const int64_t i : {0, 1}) {
    for (const int64_t k : {0, 2}) {
      ASSERT_EQ(
          write_box(w, cube, {i, 0, k}, {1, 3, 2}, box_values(cube, {i, 0, k}, {1, 3, 2}), "cube"),
          TESSERA_OK)
          << last_error();
    }
  }
  EXPECT_EQ(state.tensors.at("cube").pieces.size(), 4u);
  EXPECT_TRUE(same_bits(state.full("cube"), iota(0, 24)));

  // Zero-extent boxes are accepted and hold nothing.
  ASSERT_EQ(write_box(w, cube, {1, 3, 0}, {1, 0, 4}, {}, "empty"), TESSERA_OK) << last_error();
  EXPECT_TRUE(state.tensors.at("empty").pieces.empty());
  // A 0-d tensor: its box has no dimension (the element of flat [0, 1)).
  ASSERT_EQ(write_box(w, {}, {}, {}, {4.5F}, "scalar"), TESSERA_OK) << last_error();
  EXPECT_TRUE(same_bits(state.full("scalar"), std::vector<float>{4.5F}));
}

TEST(CollectedState, FlatRangesAndBoxesMix) {
  // [3, 4]: flat [0, 6) (row 0 and half of row 1), the box of rows 1..2 and
  // columns 2..3, and flat [8, 10) (the start of row 2).
  const std::vector<int64_t> shape = {3, 4};
  CollectedState state;
  state.add("w", shape, piece(0, iota(0, 6), 0));
  state.add("w", shape, box_piece({1, 2}, {2, 2}, {6, 7, 10, 11}, 1));
  state.add("w", shape, piece(8, iota(8, 2), 2));
  EXPECT_TRUE(same_bits(state.full("w"), iota(0, 12)));
  // The same elements read back as replicas: a box over flat pieces and a
  // flat range over boxes are recognised as already held.
  CollectedState again;
  again.add("w", shape, box_piece({0, 0}, {3, 4}, iota(0, 12), 3));
  again.merge(std::move(state));
  EXPECT_EQ(again.tensors.at("w").pieces.size(), 1u);
  EXPECT_TRUE(same_bits(again.full("w"), iota(0, 12)));
}

TEST(CollectedState, BoxGapsAndDifferingReplicasNameTheElement) {
  const std::vector<int64_t> shape = {3, 4};
  CollectedState state;
  state.add("block0.w", shape, box_piece({0, 0}, {3, 2}, {0, 1, 4, 5, 8, 9}, 0));
  Error e = thrown_error([&] { (void)state.full("block0.w"); });
  EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.what()).find("tensor 'block0.w' of shape [3, 4]: elements [2, 4) were "
                                       "not saved (the first at index [0, 2])"),
            std::string::npos)
      << e.what();

  CollectedState replica;
  replica.add("block0.w", shape, box_piece({1, 1}, {1, 2}, {5, 6.5F}, 3));
  state.add("block0.w", shape, box_piece({0, 2}, {3, 2}, {2, 3, 6, 7, 10, 11}, 1));
  e = thrown_error([&] { state.merge(std::move(replica)); });
  EXPECT_EQ(e.status(), TESSERA_ERR_MISMATCH);
  EXPECT_NE(std::string(e.what()).find("tensor 'block0.w': replicas differ at element 6 (index "
                                       "[1, 2]): rank 1 holds 6"),
            std::string::npos)
      << e.what();
  EXPECT_NE(std::string(e.what()).find("rank 3 holds 6.5"), std::string::npos) << e.what();
}

TEST(StateWriter, OverlappingBoxesAreWrittenTwice) {
  const std::vector<int64_t> shape = {3, 4};
  CollectedState state;
  const tessera_state_writer w = make_writer(state);
  {
    const ThreadRankGuard rank(0);
    ASSERT_EQ(write_box(w, shape, {0, 0}, {3, 2}, box_values(shape, {0, 0}, {3, 2})), TESSERA_OK)
        << last_error();
  }
  const ThreadRankGuard rank(1);
  EXPECT_EQ(write_box(w, shape, {1, 1}, {2, 3}, box_values(shape, {1, 1}, {2, 3})),
            TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensor 'w': elements [1:3, 1:2] written twice (by rank 0 and rank "
                              "1) although each element must be written once"),
            std::string::npos)
      << last_error();
  // A flat range over the box: the overlap is not a box.
  const std::vector<float> flat = iota(3, 6);
  const tessera_tensor_slice s{
      sizeof(tessera_tensor_slice), 2, "w", shape.data(), 3, flat.size(), nullptr, nullptr};
  EXPECT_EQ(w.write(w.ctx, &s, flat.data()), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensor 'w': 3 elements from index [1, 0] written twice"),
            std::string::npos)
      << last_error();
  ASSERT_EQ(write_box(w, shape, {0, 2}, {3, 2}, box_values(shape, {0, 2}, {3, 2})), TESSERA_OK)
      << last_error();
  EXPECT_TRUE(same_bits(state.full("w"), iota(0, 12)));
}

TEST(StateWriter, BadBoxesReturnStatusAndMessage) {
  const std::vector<int64_t> shape = {3, 4};
  CollectedState state;
  const tessera_state_writer w = make_writer(state);
  EXPECT_EQ(write_box(w, shape, {0, 3}, {3, 2}, std::vector<float>(6)),
            TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tensor 'w' of shape [3, 4]: box [0:3, 3:5] runs past dimension 1 "
                              "of size 4"),
            std::string::npos)
      << last_error();
  EXPECT_EQ(write_box(w, shape, {0, -1}, {3, 2}, std::vector<float>(6)),
            TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("box dimension 1 has offset -1"), std::string::npos) << last_error();
  EXPECT_EQ(write_box(w, shape, {0, 0}, {3, 2}, std::vector<float>(5)),
            TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("box [0:3, 0:2] of 6 elements passed with offset 0 and count 5"),
            std::string::npos)
      << last_error();

  const std::vector<int64_t> offset = {0, 0};
  const std::vector<float> six(6);
  tessera_tensor_slice s{};
  s.struct_size = sizeof s;
  s.ndim = 2;
  s.name = "w";
  s.shape = shape.data();
  s.count = 6;
  s.box_offset = offset.data();
  EXPECT_EQ(w.write(w.ctx, &s, six.data()), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("box_offset and box_extent must both be set"), std::string::npos)
      << last_error();
  EXPECT_TRUE(state.tensors.empty());

  // A caller built before the box fields (a smaller struct_size) passes flat
  // slices; whatever follows its struct is not read.
  s.struct_size = offsetof(tessera_tensor_slice, box_offset);
  ASSERT_EQ(w.write(w.ctx, &s, six.data()), TESSERA_OK) << last_error();
  EXPECT_FALSE(state.tensors.at("w").pieces.at(0).box.has_value());
  s.struct_size = offsetof(tessera_tensor_slice, box_offset) - 1;
  EXPECT_EQ(w.write(w.ctx, &s, six.data()), TESSERA_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace tessera::train

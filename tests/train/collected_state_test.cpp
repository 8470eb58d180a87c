// CollectedState and the C writer table: pieces reassemble into whole
// tensors, replicas that agree merge into one copy, replicas that differ
// are errors naming the tensor, the element and the ranks, and gaps or
// repeated writes are reported.
#include <gtest/gtest.h>

#include <cmath>
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
  const tessera_tensor_slice s{
      sizeof(tessera_tensor_slice), 2, name, kShape.data(), offset, values.size()};
  return w.write(w.ctx, &s, values.data());
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
  const tessera_tensor_slice s{sizeof(tessera_tensor_slice), 2, "w", kShape.data(), 0, 3};
  EXPECT_EQ(w.write(w.ctx, &s, nullptr), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("data is NULL"), std::string::npos) << last_error();
  EXPECT_EQ(w.write(w.ctx, nullptr, nullptr), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(state.tensors.empty());
}

}  // namespace
}  // namespace tessera::train

// Moving saved state to rank 0: the serialisation (flat and box pieces) and
// both gathers over the in-memory backend.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "run_fixture.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/core/rank_threads.hpp"
#include "tessera/core/train/state_transfer.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

using train::CollectedState;

// Rank `rank` of `world` holds its even share of a [3, 5] tensor "w" and,
// on rank 0 only, all of a scalar-like [2] tensor "b".
CollectedState share_of(int rank, int world) {
  CollectedState state;
  const uint64_t numel = 15;
  const uint64_t per = numel / static_cast<uint64_t>(world);
  const uint64_t begin = per * static_cast<uint64_t>(rank);
  const uint64_t end = rank == world - 1 ? numel : begin + per;
  CollectedState::Tensor w;
  w.shape = {3, 5};
  CollectedState::Piece piece;
  piece.offset = begin;
  for (uint64_t i = begin; i < end; ++i) piece.values.push_back(0.25f * static_cast<float>(i));
  w.pieces.push_back(piece);
  state.tensors.emplace("w", w);
  if (rank == 0) {
    CollectedState::Tensor b;
    b.shape = {2};
    b.pieces.push_back(CollectedState::Piece{0, {-1.5f, 2.5f}});
    state.tensors.emplace("b", b);
  }
  return state;
}

void expect_whole(const CollectedState& merged) {
  std::vector<float> w(15);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i);
  EXPECT_EQ(merged.full("w"), w);
  EXPECT_EQ(merged.full("b"), (std::vector<float>{-1.5f, 2.5f}));
}

TEST(StateTransfer, SerialisationRoundTrips) {
  const CollectedState state = share_of(0, 2);
  const CollectedState back = train::deserialize_state(train::serialize_state(state));
  ASSERT_EQ(back.tensors.size(), 2U);
  EXPECT_EQ(back.tensors.at("w").shape, (std::vector<int64_t>{3, 5}));
  ASSERT_EQ(back.tensors.at("w").pieces.size(), 1U);
  EXPECT_EQ(back.tensors.at("w").pieces[0].offset, 0U);
  EXPECT_EQ(back.tensors.at("w").pieces[0].values, state.tensors.at("w").pieces[0].values);
  EXPECT_EQ(back.full("b"), (std::vector<float>{-1.5f, 2.5f}));
}

TEST(StateTransfer, BoxPiecesRoundTrip) {
  using Piece = CollectedState::Piece;
  const std::vector<int64_t> shape = {3, 5};
  CollectedState columns;  // columns 3..4 of w, and a 0-d tensor as a box
  columns.add("w", shape, Piece{0, {3, 4, 8, 9, 13, 14}, 1, TensorBox{{0, 3}, {3, 2}}});
  columns.add("s", std::vector<int64_t>{}, Piece{0, {7}, 1, TensorBox{}});
  const std::vector<std::byte> bytes = train::serialize_state(columns);
  const CollectedState back = train::deserialize_state(bytes);
  ASSERT_EQ(back.tensors.at("w").pieces.size(), 1U);
  const Piece& piece = back.tensors.at("w").pieces[0];
  EXPECT_EQ(piece.box, (TensorBox{{0, 3}, {3, 2}}));
  EXPECT_EQ(piece.values, columns.tensors.at("w").pieces[0].values);
  EXPECT_EQ(back.tensors.at("s").pieces.at(0).box, TensorBox{});

  // Merged with the other columns on rank 0, the tensor is whole.
  CollectedState rest;
  rest.add("w", shape, Piece{0, {0, 1, 2, 5, 6, 7, 10, 11, 12}, 0, TensorBox{{0, 0}, {3, 3}}});
  rest.merge(train::deserialize_state(bytes));
  std::vector<float> whole(15);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<float>(i);
  EXPECT_EQ(rest.full("w"), whole);

  // A box outside its tensor is refused.
  CollectedState bad;
  CollectedState::Tensor t;
  t.shape = shape;
  t.pieces.push_back(Piece{0, {1, 2}, 0, TensorBox{{0, 4}, {1, 2}}});
  bad.tensors.emplace("w", t);
  const std::string message =
      error_of([&] { (void)train::deserialize_state(train::serialize_state(bad)); });
  EXPECT_NE(
      message.find("saved state: a piece of tensor 'w': box [0:1, 4:6] runs past dimension 1"),
      std::string::npos)
      << message;
}

TEST(StateTransfer, TruncatedOrMalformedBytesAreRefused) {
  const std::vector<std::byte> bytes = train::serialize_state(share_of(0, 2));
  for (size_t cut : {size_t{0}, size_t{5}, bytes.size() / 2, bytes.size() - 1}) {
    const std::string message = error_of(
        [&] { (void)train::deserialize_state(std::span<const std::byte>(bytes.data(), cut)); });
    EXPECT_NE(message.find("saved state:"), std::string::npos)
        << "cut at " << cut << ": " << message;
  }
  std::vector<std::byte> longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_NE(error_of([&] { (void)train::deserialize_state(longer); }).find("bytes left"),
            std::string::npos);
}

// Runs `gather` on `world` in-memory rank threads; returns rank 0's result.
CollectedState gather_over_threads(int world, train::StateGather& gather) {
  BackendSettings settings;
  settings.world_size = world;
  const auto backend = open_backend(plugins(), "inmemory", nullptr, "test", settings);
  CollectedState result;
  run_rank_threads(world, [&](int rank) {
    const auto comm = backend->connect(rank);
    auto merged = gather.gather(*comm, share_of(rank, world));
    EXPECT_EQ(merged.has_value(), rank == 0);
    if (merged) result = std::move(*merged);
    comm->barrier();
  });
  return result;
}

TEST(StateTransfer, SharedMemoryGatherMergesEveryRank) {
  for (int world : {1, 2, 3}) {
    train::SharedMemoryGather gather(world);
    expect_whole(gather_over_threads(world, gather));
    // Reusable for the next checkpoint.
    expect_whole(gather_over_threads(world, gather));
  }
}

TEST(StateTransfer, MessageGatherMergesEveryRank) {
  for (int world : {1, 2, 4}) {
    train::MessageGather gather;
    expect_whole(gather_over_threads(world, gather));
  }
}

}  // namespace
}  // namespace tessera::test

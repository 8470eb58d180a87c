// The progress board the nccl ranks share through the store while an
// operation hangs (no GPU needed): who has not arrived at a collective,
// the first abort's reason, and a store that cannot be opened saying
// nothing rather than failing the operation.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../support/host_store.hpp"
#include "../support/temp_dir.hpp"
#include "progress.hpp"

namespace tessera::nccltest {
namespace {

using nccl_backend::absent_text;
using nccl_backend::ProgressBoard;

ProgressBoard board_in(const std::string& dir) {
  return ProgressBoard([dir] { return test::file_store(dir, "nccl"); });
}

TEST(NcclProgress, RanksThatNeverArriveAreNamed) {
  const test::TempDir dir("nccl-progress");
  ProgressBoard rank0 = board_in(dir.path().string());
  ProgressBoard rank2 = board_in(dir.path().string());
  const std::string group = "run/nccl/c0/w/s1/c0";
  rank0.arrived(group, 0, 7);
  rank2.arrived(group, 2, 7);
  rank2.arrived(group, 2, 6);
  EXPECT_EQ(rank0.absent(group, 4, 0, 7), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(rank2.absent(group, 4, 2, 7), (std::vector<int32_t>{1, 3}));
  // Another collective, another group: nobody there yet.
  EXPECT_EQ(rank0.absent(group, 4, 0, 8), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(rank0.absent("run/nccl/c0/w", 2, 0, 7), (std::vector<int32_t>{1}));
  EXPECT_EQ(rank0.trouble(), "");
}

TEST(NcclProgress, TheFirstAbortIsKeptWithItsRank) {
  const test::TempDir dir("nccl-progress");
  ProgressBoard a = board_in(dir.path().string());
  ProgressBoard b = board_in(dir.path().string());
  const std::string group = "run/nccl/c0/w";
  EXPECT_FALSE(a.aborted(group).has_value());
  b.abort(group, 3, "the strategy gave up");
  a.abort(group, 1, "a later reason");
  ASSERT_TRUE(a.aborted(group).has_value());
  EXPECT_EQ(*a.aborted(group), "rank 3: the strategy gave up");
  EXPECT_FALSE(a.aborted("run/nccl/c0/w/s1/c0").has_value());
}

TEST(NcclProgress, AStoreThatCannotBeOpenedSaysNothing) {
  ProgressBoard board(
      []() -> std::unique_ptr<sdk::Store> { throw std::runtime_error("no store here"); });
  board.arrived("g", 0, 1);
  EXPECT_TRUE(board.absent("g", 3, 0, 1).empty());
  EXPECT_FALSE(board.aborted("g").has_value());
  EXPECT_EQ(board.trouble(), "no store here");
}

TEST(NcclProgress, TheAbsentAreWrittenForATimeoutMessage) {
  EXPECT_EQ(absent_text({}), "");
  EXPECT_EQ(absent_text({3}), " (rank 3 never arrived)");
  EXPECT_EQ(absent_text({1, 2}), " (ranks 1, 2 never arrived)");
}

}  // namespace
}  // namespace tessera::nccltest

// Memory accounting: per-rank and per-category current/peak bytes, the peak
// of the total, the unranked slot, reset, and concurrent updates.
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/core/memory.hpp"

namespace tessera {
namespace {

class Memory : public ::testing::Test {
 protected:
  void SetUp() override { tracker_.reset(4); }
  void TearDown() override { tracker_.reset(1); }
  MemoryTracker& tracker_ = MemoryTracker::instance();
};

TEST_F(Memory, CurrentAndPeakPerCategory) {
  tracker_.add(1, TESSERA_MEM_PARAMS, 100);
  tracker_.add(1, TESSERA_MEM_PARAMS, 50);
  tracker_.add(1, TESSERA_MEM_PARAMS, -120);
  tracker_.add(1, TESSERA_MEM_GRADS, 40);
  const MemoryStats s = tracker_.stats(1);
  EXPECT_EQ(s.current[TESSERA_MEM_PARAMS], 30);
  EXPECT_EQ(s.peak[TESSERA_MEM_PARAMS], 150);
  EXPECT_EQ(s.current[TESSERA_MEM_GRADS], 40);
  EXPECT_EQ(s.peak[TESSERA_MEM_GRADS], 40);
  EXPECT_EQ(s.current[TESSERA_MEM_OPTIMIZER], 0);
  EXPECT_EQ(s.total_current, 70);
  // Params peaked at 150 before grads were added: the total never exceeded it.
  EXPECT_EQ(s.total_peak, 150);
}

TEST_F(Memory, TotalPeakIsThePeakOfTheSum) {
  tracker_.add(0, TESSERA_MEM_PARAMS, 100);
  tracker_.add(0, TESSERA_MEM_ACTIVATIONS, 300);  // total 400
  tracker_.add(0, TESSERA_MEM_ACTIVATIONS, -300);
  tracker_.add(0, TESSERA_MEM_COMM, 200);  // total 300
  const MemoryStats s = tracker_.stats(0);
  EXPECT_EQ(s.total_current, 300);
  EXPECT_EQ(s.total_peak, 400);
  EXPECT_EQ(s.peak[TESSERA_MEM_ACTIVATIONS], 300);
  EXPECT_EQ(s.peak[TESSERA_MEM_COMM], 200);
}

TEST_F(Memory, RanksAreSeparateAndOthersGoToTheUnrankedSlot) {
  tracker_.add(0, TESSERA_MEM_COMM, 1);
  tracker_.add(3, TESSERA_MEM_COMM, 3);
  tracker_.add(-1, TESSERA_MEM_COMM, 10);
  tracker_.add(4, TESSERA_MEM_COMM, 20);  // out of range
  EXPECT_EQ(tracker_.ranks(), 4);
  EXPECT_EQ(tracker_.stats(0).current[TESSERA_MEM_COMM], 1);
  EXPECT_EQ(tracker_.stats(3).current[TESSERA_MEM_COMM], 3);
  EXPECT_EQ(tracker_.stats(1).total_current, 0);
  EXPECT_EQ(tracker_.stats(-1).current[TESSERA_MEM_COMM], 30);
  EXPECT_EQ(tracker_.stats(99).current[TESSERA_MEM_COMM], 30);  // same slot
}

TEST_F(Memory, UnknownCategoryCountsAsOther) {
  tracker_.add(2, 77, 5);
  tracker_.add(2, -1, 6);
  EXPECT_EQ(tracker_.stats(2).current[TESSERA_MEM_OTHER], 11);
}

TEST_F(Memory, ResetClearsAndCanGrow) {
  tracker_.add(1, TESSERA_MEM_GRADS, 9);
  tracker_.reset(4);
  EXPECT_EQ(tracker_.stats(1).peak[TESSERA_MEM_GRADS], 0);
  tracker_.reset(64);
  EXPECT_EQ(tracker_.ranks(), 64);
  tracker_.add(63, TESSERA_MEM_GRADS, 9);
  EXPECT_EQ(tracker_.stats(63).current[TESSERA_MEM_GRADS], 9);
  EXPECT_EQ(tracker_.stats(-1).current[TESSERA_MEM_GRADS], 0);
  tracker_.reset(2);
  EXPECT_EQ(tracker_.ranks(), 2);
  EXPECT_EQ(tracker_.stats(63).current[TESSERA_MEM_GRADS], 0);  // now the cleared unranked slot
  tracker_.reset(-3);
  EXPECT_EQ(tracker_.ranks(), 0);
}

TEST_F(Memory, ConcurrentUpdatesAreExact) {
  constexpr int kThreads = 4;
  constexpr int kIterations = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      for (int i = 0; i < kIterations; ++i) {
        tracker_.add(0, TESSERA_MEM_COMM, 16);  // all threads on one rank
        tracker_.add(t, TESSERA_MEM_GRADS, 8);  // each thread on its own rank
        tracker_.add(0, TESSERA_MEM_COMM, -16);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const MemoryStats s0 = tracker_.stats(0);
  EXPECT_EQ(s0.current[TESSERA_MEM_COMM], 0);
  EXPECT_GE(s0.peak[TESSERA_MEM_COMM], 16);
  EXPECT_LE(s0.peak[TESSERA_MEM_COMM], 16 * kThreads);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(tracker_.stats(t).current[TESSERA_MEM_GRADS], int64_t{8} * kIterations);
    EXPECT_EQ(tracker_.stats(t).peak[TESSERA_MEM_GRADS], int64_t{8} * kIterations);
  }
}

TEST(MemoryNames, CategoryNames) {
  EXPECT_STREQ(MemoryTracker::category_name(TESSERA_MEM_PARAMS), "params");
  EXPECT_STREQ(MemoryTracker::category_name(TESSERA_MEM_GRADS), "grads");
  EXPECT_STREQ(MemoryTracker::category_name(TESSERA_MEM_OPTIMIZER), "optimizer");
  EXPECT_STREQ(MemoryTracker::category_name(TESSERA_MEM_COMM), "comm");
  EXPECT_STREQ(MemoryTracker::category_name(TESSERA_MEM_ACTIVATIONS), "activations");
  EXPECT_STREQ(MemoryTracker::category_name(TESSERA_MEM_OTHER), "other");
  EXPECT_STREQ(MemoryTracker::category_name(TESSERA_MEM_CATEGORY_COUNT), "unknown");
}

}  // namespace
}  // namespace tessera

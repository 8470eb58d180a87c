// The SDK's flat parameter layout, even shards, slot pointers, gradient
// buckets, tracked buffers and 16-bit staging conversions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fake_tables.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/estimate_formulas.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/grad_buckets.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::test {
namespace {

// Three units; mid.t is tied to embed.a; head.e is empty.
//   flat: a [0,6) b [6,10) c [10,15) d [15,18) e [18,18)
FakeModel layout_model() {
  return FakeModel({
      FakeUnit{"embed", {FakeParam{"a", {2, 3}}, FakeParam{"b", {4}}}},
      FakeUnit{"mid", {FakeParam{"c", {5}}, FakeParam{"t", {2, 3}, 0, 0}}},
      FakeUnit{"head", {FakeParam{"d", {3}}, FakeParam{"e", {0}}}},
  });
}

struct Fixture {
  FakeModel model = layout_model();
  HostContext host_ctx{"strategy.test"};
  sdk::Host host{host_ctx.api()};
  sdk::ModelView view{host, model.api(), model.handle()};
};

TEST(FlatLayout, OwnedParametersInUnitOrderWithTiesResolved) {
  Fixture f;
  const sdk::FlatLayout layout(f.view);
  ASSERT_EQ(layout.entries().size(), 5U);
  EXPECT_EQ(layout.total(), 18U);
  const std::vector<std::string> names = {"embed.a", "embed.b", "mid.c", "head.d", "head.e"};
  const std::vector<uint64_t> offsets = {0, 6, 10, 15, 18};
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(layout.entry(i).full_name, names[i]);
    EXPECT_EQ(layout.entry(i).offset, offsets[i]);
  }
  EXPECT_EQ(layout.entry_of(1, 1), 0U);  // mid.t -> embed.a
  EXPECT_EQ(layout.entry_of(1, 0), 2U);
  EXPECT_EQ(layout.entry(0).users, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(layout.entry(0).final_grad_unit(), 0);
  EXPECT_EQ(layout.entry(3).final_grad_unit(), 2);
  EXPECT_EQ(layout.unit_range(0).begin, 0U);
  EXPECT_EQ(layout.unit_range(0).end, 10U);
  EXPECT_EQ(layout.unit_range(1).size(), 5U);  // the tied slot owns nothing
  EXPECT_EQ(layout.unit_range(2).begin, 15U);
  EXPECT_THROW((void)layout.entry_of(3, 0), Error);
}

TEST(FlatLayout, PiecesOfARangeCrossingTensors) {
  Fixture f;
  const sdk::FlatLayout layout(f.view);
  const auto pieces = layout.pieces(4, 12);
  ASSERT_EQ(pieces.size(), 3U);
  EXPECT_EQ(pieces[0].entry, 0U);
  EXPECT_EQ(pieces[0].tensor_offset, 4U);
  EXPECT_EQ(pieces[0].count, 2U);
  EXPECT_EQ(pieces[1].entry, 1U);
  EXPECT_EQ(pieces[1].tensor_offset, 0U);
  EXPECT_EQ(pieces[1].count, 4U);
  EXPECT_EQ(pieces[2].entry, 2U);
  EXPECT_EQ(pieces[2].flat_offset, 10U);
  EXPECT_EQ(pieces[2].count, 2U);
  // Padding past the end belongs to no tensor.
  const auto tail = layout.pieces(16, 25);
  ASSERT_EQ(tail.size(), 1U);
  EXPECT_EQ(tail[0].entry, 3U);
  EXPECT_EQ(tail[0].count, 2U);
  EXPECT_TRUE(layout.pieces(18, 30).empty());
}

TEST(ShardRange, EvenShardsWithPaddingCoverEverythingOnce) {
  for (uint64_t total : {0U, 1U, 2U, 18U, 19U, 20U}) {
    for (int32_t world = 1; world <= 4; ++world) {
      uint64_t covered = 0;
      for (int32_t r = 0; r < world; ++r) {
        const sdk::ShardRange s = sdk::even_shard(total, world, r);
        EXPECT_EQ(s.padded.size(), s.shard_size);
        EXPECT_EQ(s.padded_total, s.shard_size * static_cast<uint64_t>(world));
        EXPECT_EQ(s.real.begin, std::min(covered, total));
        covered += s.real.size();
        EXPECT_EQ(s.real.size() + s.padding(), s.shard_size);
      }
      EXPECT_EQ(covered, total) << total << " over " << world;
    }
  }
  const sdk::ShardRange last = sdk::even_shard(18, 4, 3);
  EXPECT_EQ(last.shard_size, 5U);
  EXPECT_EQ(last.real.begin, 15U);
  EXPECT_EQ(last.real.end, 18U);
  EXPECT_EQ(last.padding(), 2U);
  EXPECT_THROW((void)sdk::even_shard(10, 0, 0), Error);
  EXPECT_THROW((void)sdk::even_shard(10, 2, 2), Error);
}

TEST(SlotPointers, TiedSlotsFollowTheirOwner) {
  Fixture f;
  const sdk::FlatLayout layout(f.view);
  std::vector<float> flat(layout.total());
  sdk::SlotPointers ptrs(layout, flat.data());
  EXPECT_EQ(ptrs.unit(0)[0], flat.data());
  EXPECT_EQ(ptrs.unit(1)[1], flat.data());  // tied
  EXPECT_EQ(ptrs.unit(1)[0], flat.data() + 10);
  EXPECT_EQ(ptrs.unit(2)[1], flat.data() + 18);
  std::vector<float> gathered(6);
  ptrs.bind_entry(0, gathered.data());
  EXPECT_EQ(ptrs.unit(0)[0], gathered.data());
  EXPECT_EQ(ptrs.unit(1)[1], gathered.data());
  EXPECT_TRUE(ptrs.bound(1));
  ptrs.bind_entry(2, nullptr);
  EXPECT_FALSE(ptrs.bound(1));
  EXPECT_TRUE(ptrs.bound(0));
}

TEST(GradBuckets, ReverseOrderWholeParametersAndSmallFirstBucket) {
  Fixture f;
  const sdk::FlatLayout layout(f.view);
  const auto buckets = sdk::plan_grad_buckets(layout, 4, 8);
  // head.d(+e) | mid.c | embed.b | embed.a
  ASSERT_EQ(buckets.size(), 4U);
  const std::vector<std::pair<uint64_t, uint64_t>> ranges = {{15, 18}, {10, 15}, {6, 10}, {0, 6}};
  const std::vector<int32_t> ready = {2, 1, 0, 0};
  for (size_t i = 0; i < buckets.size(); ++i) {
    EXPECT_EQ(buckets[i].range.begin, ranges[i].first) << i;
    EXPECT_EQ(buckets[i].range.end, ranges[i].second) << i;
    EXPECT_EQ(buckets[i].ready_after_unit, ready[i]) << i;
  }
  // Large capacities: the first bucket is small, the rest is one bucket.
  const auto two = sdk::plan_grad_buckets(layout, 3, 1000);
  ASSERT_EQ(two.size(), 2U);
  EXPECT_EQ(two[0].range.begin, 15U);
  EXPECT_EQ(two[1].range.begin, 0U);
  EXPECT_EQ(two[1].range.end, 15U);
  EXPECT_EQ(two[1].ready_after_unit, 0);
  // Capacity 1: every non-empty parameter alone, none split.
  const auto alone = sdk::plan_grad_buckets(layout, 1, 1);
  ASSERT_EQ(alone.size(), 4U);
  EXPECT_EQ(alone[3].range.size(), 6U);
}

// zero1's buckets are contiguous flat ranges of N equal blocks over the
// range padded to N shards, from the end of the model down; each is ready
// once every gradient it covers is final.
TEST(GradBuckets, ShardBucketsAreBlocksOfThePaddedRange) {
  Fixture f;
  const sdk::FlatLayout layout(f.view);
  // 4 ranks: S = 5, padded to 20. First bucket 8 / 4 = 2 elements per rank.
  const auto four = sdk::plan_shard_buckets(layout, 4, 8, 12);
  ASSERT_EQ(four.size(), 2U);
  // c[12,15), d[15,18) and padding [18,20): final after unit 1 (c).
  EXPECT_EQ(four[0].range.begin, 12U);
  EXPECT_EQ(four[0].range.end, 20U);
  EXPECT_EQ(four[0].first_entry, 2U);
  EXPECT_EQ(four[0].last_entry, 3U);
  EXPECT_EQ(four[0].ready_after_unit, 1);
  // a[0,6), b[6,10), c[10,12); a is tied into mid, but its last user in
  // backward order is unit 0.
  EXPECT_EQ(four[1].range.begin, 0U);
  EXPECT_EQ(four[1].range.end, 12U);
  EXPECT_EQ(four[1].first_entry, 0U);
  EXPECT_EQ(four[1].last_entry, 2U);
  EXPECT_EQ(four[1].ready_after_unit, 0);
  // One rank: the first bucket is the end of the model, c and d, final
  // after unit 1's backward.
  const auto one = sdk::plan_shard_buckets(layout, 1, 8, 12);
  ASSERT_EQ(one.size(), 2U);
  EXPECT_EQ(one[0].range.begin, 10U);
  EXPECT_EQ(one[0].range.end, 18U);
  EXPECT_EQ(one[0].ready_after_unit, 1);
  EXPECT_EQ(one[1].range.begin, 0U);
  EXPECT_EQ(one[1].ready_after_unit, 0);
  // A capacity below the world size still gives one element per rank.
  const auto tiny = sdk::plan_shard_buckets(layout, 4, 1, 1);
  ASSERT_EQ(tiny.size(), 5U);
  for (size_t i = 0; i < tiny.size(); ++i) {
    EXPECT_EQ(tiny[i].range.size(), 4U) << i;
    EXPECT_EQ(tiny[i].range.end, 20U - 4 * i) << i;
  }
  // The per-rank lengths are shard_grid_plan's (what the estimate uses).
  const sdk::ShardGridPlan plan = sdk::shard_grid_plan(5, 4, 8, 12);
  ASSERT_EQ(plan.buckets.size(), four.size());
  for (size_t i = 0; i < four.size(); ++i) {
    EXPECT_EQ(static_cast<uint64_t>(plan.buckets[i]) * 4, four[i].range.size()) << i;
  }
  EXPECT_THROW((void)sdk::plan_shard_buckets(layout, 0, 8, 8), Error);
}

TEST(GradBuckets, ScheduleStartsReadyBucketsInOrderOnly) {
  std::vector<sdk::GradBucket> buckets(3);
  buckets[0].ready_after_unit = 2;
  buckets[1].ready_after_unit = 0;  // e.g. holds a tied parameter
  buckets[2].ready_after_unit = 1;
  sdk::BucketSchedule schedule(buckets);
  std::vector<size_t> started;
  auto start = [&](size_t b) { started.push_back(b); };
  schedule.after_unit(2, start);
  EXPECT_EQ(started, (std::vector<size_t>{0}));
  schedule.after_unit(1, start);  // bucket 2 is ready but waits behind 1
  EXPECT_EQ(started, (std::vector<size_t>{0}));
  schedule.after_unit(0, start);
  EXPECT_EQ(started, (std::vector<size_t>{0, 1, 2}));
  schedule.reset();
  started.clear();
  schedule.start_rest(start);
  EXPECT_EQ(started, (std::vector<size_t>{0, 1, 2}));
}

TEST(GradBuckets, CapacityInMebibytes) {
  EXPECT_EQ(sdk::bucket_elements(1.0, "bucket_mb"), 262144U);
  EXPECT_EQ(sdk::bucket_elements(1e-9, "bucket_mb"), 1U);
  try {
    (void)sdk::bucket_elements(0.0, "first_bucket_mb");
    FAIL() << "0 MiB accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("first_bucket_mb"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)sdk::bucket_elements(std::nan(""), "bucket_mb"), Error);
}

TEST(TrackedBuffer, ReportsAllocationResizeMoveAndRelease) {
  MemoryTracker::instance().reset(2);
  HostContext ctx("strategy.test");
  const sdk::Host host(ctx.api());
  auto current = [] { return MemoryTracker::instance().stats(1).current[TESSERA_MEM_GRADS]; };
  {
    sdk::TrackedBuffer<float> buf(host, 1, TESSERA_MEM_GRADS, 100);
    EXPECT_EQ(current(), 400);
    EXPECT_EQ(buf[99], 0.0F);
    buf.resize(10);
    EXPECT_EQ(current(), 40);
    sdk::TrackedBuffer<float> moved(std::move(buf));
    EXPECT_EQ(current(), 40);
    EXPECT_EQ(moved.size(), 10U);
    moved.resize(50);
    EXPECT_EQ(current(), 200);
  }
  EXPECT_EQ(current(), 0);
  EXPECT_EQ(MemoryTracker::instance().stats(1).peak[TESSERA_MEM_GRADS], 400);
}

TEST(CommDtype, ParsesNamesAndRoundTrips16BitValues) {
  EXPECT_EQ(sdk::parse_comm_dtype("f32", "reduce_dtype"), TESSERA_F32);
  EXPECT_EQ(sdk::parse_comm_dtype("bf16", "reduce_dtype"), TESSERA_BF16);
  EXPECT_EQ(sdk::parse_comm_dtype("f16", "reduce_dtype"), TESSERA_F16);
  try {
    (void)sdk::parse_comm_dtype("fp8", "reduce_dtype");
    FAIL() << "fp8 accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("reduce_dtype"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32, bf16, f16"), std::string::npos) << msg;
  }
  const std::vector<float> exact = {1.5F, -2.0F, 0.25F, 0.0F};
  for (const tessera_dtype d : {TESSERA_BF16, TESSERA_F16}) {
    std::vector<uint16_t> staged(exact.size());
    sdk::pack_16bit(exact, d, staged.data());
    std::vector<float> back(exact.size());
    sdk::unpack_16bit(staged.data(), d, back);
    EXPECT_EQ(back, exact);
  }
  // 1 + 2^-10 is below bf16's resolution at 1 but exact in f16.
  const std::vector<float> fine = {1.0F + 0.0009765625F};
  std::vector<uint16_t> one(1);
  std::vector<float> out(1);
  sdk::pack_16bit(fine, TESSERA_BF16, one.data());
  sdk::unpack_16bit(one.data(), TESSERA_BF16, out);
  EXPECT_EQ(out[0], 1.0F);
  sdk::pack_16bit(fine, TESSERA_F16, one.data());
  sdk::unpack_16bit(one.data(), TESSERA_F16, out);
  EXPECT_EQ(out[0], fine[0]);
  EXPECT_THROW(sdk::pack_16bit(fine, TESSERA_F32, one.data()), Error);
}

}  // namespace
}  // namespace tessera::test

// `zero1` options, bytes and communication memory (its equivalence with
// `none` and `ddp` and its memory formula are in
// sharded_equivalence_test.cpp): mlp's shards need padding; the bytes sent
// per step are the reduce-scatter and the shard allgather; overlap and
// bucket sizes keep the bits; both collectives run in place, with no
// communication staging; bad options are refused before any rank starts.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "strategy_support.hpp"

namespace tessera::test {
namespace {

// Padding is exercised: mlp's Ψ is a multiple of neither 2 nor 4, so the
// last shard on 2 and 4 ranks ends in padding (gpt's is a multiple of 12).
TEST(Zero1Memory, MlpShardsNeedPadding) {
  const int64_t psi = cached(uneven_spec("mlp", "none", 1)).plan.parameters;
  EXPECT_NE(psi % 2, 0) << psi << " parameters";
  EXPECT_NE(psi % 4, 0) << psi << " parameters";
}

// Per step and rank, as in the ZeRO paper: the reduce-scatter of the
// padded gradient grid ((N-1)/N of N·4·ceil(Ψ/N) bytes over the buckets),
// the allreduce of the f64 sum of squares (ring volume 2(N-1)/N · 8, in
// whole bytes) and the allgather of the padded shards ((N-1) · 4·ceil(Ψ/N)):
// 2Ψ-equivalent in total. Exact for every N: each bucket is N equal blocks.
TEST(Zero1Options, BytesSentAreTheReduceScatterAndTheShardAllgather) {
  for (const int world : {2, 3, 4}) {
    const train::RunResult& result = cached(uneven_spec("gpt", "zero1", world));
    const int64_t psi = result.plan.parameters;
    const int64_t shard = (psi + world - 1) / world;
    ASSERT_FALSE(result.logged.empty());
    EXPECT_EQ(result.logged.back().comm_bytes, 2 * (world - 1) * 4 * shard + norm_bytes(world))
        << world << " ranks";
  }
}

// Overlap off, and buckets so small that the reduce-scatter and the
// parameter allgather run as many collectives of a few hundred elements
// (and each rank's shard is made of as many blocks), give the same bits as
// the defaults: the plan changes when operations start and which rank
// updates an element, not what is computed.
TEST(Zero1Options, OverlapAndBucketSizesKeepTheBits) {
  const train::RunResult& base = cached(uneven_spec("mlp", "zero1", 3));
  const train::RunResult& no_overlap = cached(uneven_spec("mlp", "zero1", 3, "overlap = false"));
  const train::RunResult& tiny =
      cached(uneven_spec("mlp", "zero1", 3, "bucket_mb = 0.001\nfirst_bucket_mb = 0.0005"));
  EXPECT_EQ(first_bit_difference(merged(no_overlap), merged(base)), "");
  EXPECT_EQ(first_bit_difference(merged(tiny), merged(base)), "");
  expect_params_identical(tiny);
}

// The reduce-scatter runs in place in the gradient buffer and the
// parameter allgather in place in the parameter buffer (both padded to N
// shards), so zero1 stages nothing for communication: the tracked COMM peak
// is 0 with the default buckets (one bucket holds these models) and with
// 0.002 MiB buckets (many), with the same bits and bytes sent.
TEST(Zero1Memory, CommunicationIsInPlace) {
  const std::string small = "bucket_mb = 0.002\nfirst_bucket_mb = 0.002";
  for (const int world : {2, 3, 4}) {
    const train::RunResult& result = cached(uneven_spec("gpt", "zero1", world, small));
    const train::RunResult& base = cached(uneven_spec("gpt", "zero1", world));
    ASSERT_EQ(result.memory.size(), static_cast<size_t>(world));
    for (size_t r = 0; r < result.memory.size(); ++r) {
      EXPECT_EQ(result.memory[r].peak[TESSERA_MEM_COMM], 0) << world << " ranks, rank " << r;
      EXPECT_EQ(base.memory[r].peak[TESSERA_MEM_COMM], 0) << world << " ranks, rank " << r;
    }
    EXPECT_EQ(first_bit_difference(merged(result), merged(base)), "") << world << " ranks";
    EXPECT_EQ(result.logged.back().comm_bytes, base.logged.back().comm_bytes) << world << " ranks";
  }
}

TEST(Zero1Options, NonPositiveBucketSizeIsRefused) {
  std::string msg = refusal(uneven_spec("mlp", "zero1", 2, "bucket_mb = 0"));
  EXPECT_NE(msg.find("bucket_mb"), std::string::npos) << msg;
  msg = refusal(uneven_spec("mlp", "zero1", 2, "first_bucket_mb = -1"));
  EXPECT_NE(msg.find("first_bucket_mb"), std::string::npos) << msg;
}

TEST(Zero1Options, ReduceDtypeIsNotAnOption) {
  const std::string msg = refusal(uneven_spec("mlp", "zero1", 2, "reduce_dtype = \"bf16\""));
  EXPECT_NE(msg.find("reduce_dtype"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tessera::test

// The options of `ddp`: overlap on and off, bucket sizes, gradient
// accumulation over micro-batches and 16-bit reduction all train to the
// same parameters (exactly, or within a stated tolerance); bytes sent and
// memory follow from the model size; bad options are refused before any
// rank starts.
#include <gtest/gtest.h>

#include <string>

#include "strategy_support.hpp"

namespace tessera::test {
namespace {

RunSpec gpt_spec(int world, const std::string& options = "") {
  return spec("gpt", "ddp", world, options);
}

void expect_ranks_identical(const train::RunResult& result) {
  for (size_t r = 1; r < result.final_state.size(); ++r) {
    EXPECT_EQ(first_bit_difference(result.final_state[r], result.final_state[0]), "")
        << "rank " << r << " differs from rank 0";
  }
}

// The same sums in the same buckets whenever they are started: bit-identical.
TEST(DdpOptions, OverlapOffGivesTheSameBits) {
  const train::RunResult on = run(gpt_spec(3, "overlap = true"));
  const train::RunResult off = run(gpt_spec(3, "overlap = false"));
  ASSERT_EQ(on.final_state.size(), 3U);
  ASSERT_EQ(off.final_state.size(), 3U);
  EXPECT_EQ(first_bit_difference(off.final_state[0], on.final_state[0]), "");
  expect_ranks_identical(off);
}

// One bucket per parameter vs one bucket for everything: each element is
// reduced the same way, so the results are bit-identical.
TEST(DdpOptions, TinyBucketsEqualOneLargeBucket) {
  const train::RunResult tiny = run(gpt_spec(2, "bucket_mb = 0.00001\nfirst_bucket_mb = 0.00001"));
  const train::RunResult large = run(gpt_spec(2, "bucket_mb = 1000\nfirst_bucket_mb = 1000"));
  EXPECT_EQ(first_bit_difference(tiny.final_state[0], large.final_state[0]), "");
  expect_ranks_identical(tiny);
}

// Two micro-batches per rank accumulate to the gradient of one: only the
// order of float additions changes.
TEST(DdpOptions, MicroBatchesMatchOneBatch) {
  RunSpec two = gpt_spec(2);
  two.micro_batches = 2;
  const train::RunResult accumulated = run(two);
  const train::RunResult single = run(gpt_spec(2));
  RunSpec none = gpt_spec(1);
  none.strategy = "none";
  const train::RunResult reference = run(none);
  std::string worst;
  EXPECT_LE(max_param_rel_diff(accumulated.final_state[0], single.final_state[0], &worst), 1e-5)
      << worst;
  EXPECT_LE(max_param_rel_diff(accumulated.final_state[0], reference.final_state[0], &worst), 1e-5)
      << worst;
  expect_ranks_identical(accumulated);
}

// bf16 keeps 8 significant bits, f16 11: gradients are rounded to about
// 4e-3 and 5e-4 of their size before the sum and the sum is rounded again.
// After 20 AdamW steps the parameters stay within 5e-2 (bf16) and 1e-2
// (f16) relative difference of the f32 run (measured: up to 1.7e-2 and
// 3.3e-3), yet differ from it (the 16-bit path was taken), and the replicas
// still agree bit for bit.
TEST(DdpOptions, SixteenBitReductionWithinLooserTolerance) {
  const train::RunResult f32 = run(gpt_spec(2));
  const train::RunResult bf16 = run(gpt_spec(2, "reduce_dtype = \"bf16\""));
  const train::RunResult f16 = run(gpt_spec(2, "reduce_dtype = \"f16\""));
  std::string worst;
  const double d_bf16 = max_param_rel_diff(bf16.final_state[0], f32.final_state[0], &worst);
  EXPECT_LE(d_bf16, 5e-2) << worst;
  EXPECT_GT(d_bf16, 0.0);
  const double d_f16 = max_param_rel_diff(f16.final_state[0], f32.final_state[0], &worst);
  EXPECT_LE(d_f16, 1e-2) << worst;
  EXPECT_GT(d_f16, 0.0);
  expect_ranks_identical(bf16);
  expect_ranks_identical(f16);
}

// Ring-allreduce volume on 2 ranks is the buffer size once: 4 bytes per
// parameter in f32, 2 in bf16. Parameters, gradients and Adam's two slots
// are whole on every rank; bf16 adds a 2-byte staging copy.
TEST(DdpOptions, BytesSentAndMemoryFollowTheModelSize) {
  const train::RunResult f32 = run(gpt_spec(2));
  const train::RunResult bf16 = run(gpt_spec(2, "reduce_dtype = \"bf16\""));
  const int64_t psi = f32.plan.parameters;
  ASSERT_GT(psi, 0);
  ASSERT_FALSE(f32.logged.empty());
  ASSERT_FALSE(bf16.logged.empty());
  EXPECT_EQ(f32.logged.back().comm_bytes, 4 * psi);
  EXPECT_EQ(bf16.logged.back().comm_bytes, 2 * psi);
  ASSERT_NO_FATAL_FAILURE(expect_persistent_peaks(f32, 2, {4 * psi, 4 * psi, 8 * psi}));
  ASSERT_EQ(bf16.memory.size(), 2U);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_GT(f32.memory[r].peak[TESSERA_MEM_ACTIVATIONS], 0) << "rank " << r;
    EXPECT_GE(bf16.memory[r].peak[TESSERA_MEM_COMM], 2 * psi) << "rank " << r;
  }
}

TEST(DdpOptions, UnknownReduceDtypeIsRefused) {
  const std::string msg = refusal(gpt_spec(2, "reduce_dtype = \"f64\""));
  EXPECT_NE(msg.find("reduce_dtype"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32, bf16, f16"), std::string::npos) << msg;
}

TEST(DdpOptions, NonPositiveBucketSizeIsRefused) {
  std::string msg = refusal(gpt_spec(2, "bucket_mb = 0"));
  EXPECT_NE(msg.find("bucket_mb"), std::string::npos) << msg;
  msg = refusal(gpt_spec(2, "first_bucket_mb = -1"));
  EXPECT_NE(msg.find("first_bucket_mb"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tessera::test

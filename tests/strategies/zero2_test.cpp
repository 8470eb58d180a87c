// `zero2` options and bytes (its equivalence with `none` and its memory
// formula are in sharded_equivalence_test.cpp): overlap off gives the same
// bits; bf16 gradients on the wire stay close to `none`; gradient
// accumulation over two micro-batches still matches `none`; the bytes sent
// per step are exactly the reduce-scatter and allgather of the padded
// per-unit shards; bad options are refused naming the option.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "strategy_support.hpp"

namespace tessera::test {
namespace {

// bf16 keeps 8 significant bits: each reduce-scatter rounds the summed
// gradients to about 2^-9 relative. AdamW divides by the running gradient
// magnitude, so for parameters whose gradients are small and noisy (the
// layer-norm biases of gpt) those roundings shift the steps by a few
// percent; after 20 steps the worst tensor differs from `none` by about 1%
// of its scale (gpt block1.ln1_b), the rest far less. 3% bounds that with
// margin while still catching a wrong reduction (off by whole gradients).
constexpr double kZero2Bf16Tolerance = 3e-2;

// Overlap changes when the reduce-scatters are waited for, not what they
// deliver.
TEST(Zero2Options, OverlapOffKeepsTheBits) {
  for (const std::string model : {"mlp", "gpt"}) {
    const train::RunResult& on = cached(uneven_spec(model, "zero2", 3));
    const train::RunResult& off = cached(uneven_spec(model, "zero2", 3, "overlap = false"));
    EXPECT_EQ(first_bit_difference(merged(off), merged(on)), "") << model;
    expect_params_identical(off);
  }
}

// bf16 on the wire: ranks stay identical and the result stays close.
TEST(Zero2Options, Bf16GradientsStayClose) {
  for (const std::string model : {"mlp", "gpt"}) {
    const train::RunResult& result =
        cached(uneven_spec(model, "zero2", 2, "reduce_dtype = \"bf16\""));
    const train::RunResult& none = cached(uneven_spec(model, "none", 1));
    ASSERT_EQ(result.last_step, 20);
    expect_params_identical(result);
    std::string worst;
    const double diff = max_param_rel_diff(result.final_state[0], none.final_state[0], &worst);
    EXPECT_LE(diff, kZero2Bf16Tolerance) << model << ": largest difference in " << worst;
    // The wire really is 16 bits: the f32 run differs.
    EXPECT_NE(first_bit_difference(merged(result), merged(cached(uneven_spec(model, "zero2", 2)))),
              "")
        << model;
  }
}

// Each micro-batch's unit gradients are reduce-scattered and added into the
// shard; the sum over micro-batches matches `none`'s accumulation.
TEST(Zero2Options, MicroBatchesMatchNone) {
  for (const std::string model : {"mlp", "gpt"}) {
    const train::RunResult& result = cached(uneven_spec(model, "zero2", 2, "", 2));
    const train::RunResult& none = cached(uneven_spec(model, "none", 1, "", 2));
    ASSERT_EQ(result.last_step, 20);
    expect_params_identical(result);
    std::string worst;
    EXPECT_LE(max_param_rel_diff(result.final_state[0], none.final_state[0], &worst), kTolerance)
        << model << ": largest difference in " << worst;
  }
}

// Per step and rank, with S = Σ_u ceil(Ψ_u / N) the per-unit padded
// shard: each unit's gradients are reduce-scattered once ((N-1)/N of
// N·4·s_u bytes) and its updated parameters allgathered once (as much),
// plus the f64 norm allreduce (2(N-1)/N · 8 bytes, whole bytes):
// 2·(N-1)·4·S, the paper's 2Ψ with padding. With bf16 on the wire the
// reduce-scatter halves.
TEST(Zero2Options, BytesSentAreTheReduceScatterAndTheAllgather) {
  for (const std::string model : {"mlp", "gpt"}) {
    const std::map<std::string, int64_t> psi =
        unit_params(cached(uneven_spec(model, "none", 1)).final_state.at(0));
    for (const int world : {2, 3, 4}) {
      const int64_t shard = padded_shard(psi, world);
      const int64_t norm = norm_bytes(world);
      const train::RunResult& f32 = cached(uneven_spec(model, "zero2", world));
      ASSERT_FALSE(f32.logged.empty());
      EXPECT_EQ(f32.logged.back().comm_bytes, 2 * (world - 1) * 4 * shard + norm)
          << model << " on " << world << " ranks";
      if (world == 2) {
        const train::RunResult& bf16 =
            cached(uneven_spec(model, "zero2", world, "reduce_dtype = \"bf16\""));
        ASSERT_FALSE(bf16.logged.empty());
        EXPECT_EQ(bf16.logged.back().comm_bytes, (world - 1) * (2 + 4) * shard + norm)
            << model << " bf16 on " << world << " ranks";
      }
    }
  }
}

TEST(Zero2Options, BadReduceDtypeIsRefused) {
  const std::string msg = refusal(uneven_spec("mlp", "zero2", 2, "reduce_dtype = \"f8\""));
  EXPECT_NE(msg.find("reduce_dtype"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f8"), std::string::npos) << msg;
}

TEST(Zero2Options, UnknownOptionIsRefused) {
  const std::string msg = refusal(uneven_spec("mlp", "zero2", 2, "prefetch = true"));
  EXPECT_NE(msg.find("prefetch"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tessera::test

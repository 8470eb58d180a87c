// `fsdp` with 16-bit communication: param_dtype rounds the f32 master
// pieces to bf16/f16 for the allgather (compute uses the gathered values
// widened back to f32), reduce_dtype sends the gradient reduce-scatter and
// the replica allreduce in bf16/f16. The ranks still agree bit for bit,
// the run stays within a stated looser tolerance of `none` on one rank,
// and the bytes sent per step are exactly half of f32's (the f64 norm
// allreduce aside).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "strategy_support.hpp"

namespace tessera::test {
namespace {

// bf16 keeps 8 significant bits. With param_dtype = bf16 every forward and
// backward computes with parameters rounded to about 2^-9 of their size,
// and reduce_dtype = bf16 rounds the summed gradients as much; AdamW's
// normalised steps turn those roundings into a drift of the weight
// matrices. Measured after 20 steps (max relative difference to `none`):
// mlp 7.5e-3 (2 ranks) and 8.1e-3 (4), gpt 1.7e-2 (2) and 1.9e-2 (4),
// gpt hybrid_shard 2.0e-2, gpt shard_grad_op 2.2e-2. 5% bounds them with
// margin while a wrong reduction (whole gradients lost or doubled) is far
// outside it.
constexpr double kFsdpBf16Tolerance = 5e-2;
// f16 keeps 11 significant bits. Measured: gpt no_shard with f16
// gradients 1.6e-3, gpt full_shard with f16 parameters and gradients on 4
// ranks 3.1e-3.
constexpr double kFsdpF16Tolerance = 1e-2;

const char* const kBf16 = "param_dtype = \"bf16\"\nreduce_dtype = \"bf16\"";

TEST(FsdpDtype, Bf16ParamsAndGradientsStayClose) {
  for (const std::string model : {"mlp", "gpt"}) {
    const train::RunResult& none = cached(spec(model, "none", 1));
    for (const int world : {2, 4}) {
      const train::RunResult& result = cached(spec(model, "fsdp", world, kBf16));
      ASSERT_EQ(result.last_step, 20);
      expect_params_identical(result);
      std::string worst;
      const double diff = max_param_rel_diff(result.final_state[0], none.final_state[0], &worst);
      EXPECT_LE(diff, kFsdpBf16Tolerance) << model << " on " << world << ": worst " << worst;
      // The 16-bit path was taken: the f32 run differs.
      EXPECT_NE(first_bit_difference(merged(result), merged(cached(spec(model, "fsdp", world)))),
                "")
          << model << " on " << world;
    }
  }
}

// The other sharding strategies take the same 16-bit paths: hybrid_shard
// also allreduces across the replicas in bf16, no_shard allreduces the
// whole gradients in f16 (parameters are not gathered there).
TEST(FsdpDtype, HybridAndNoShardStayClose) {
  const struct {
    std::string options;
    int world;
    double tolerance;
  } cases[] = {
      {std::string(kBf16) + "\nsharding_strategy = \"hybrid_shard\"\nshard_group_size = 2", 4,
       kFsdpBf16Tolerance},
      {std::string(kBf16) + "\nsharding_strategy = \"shard_grad_op\"", 3, kFsdpBf16Tolerance},
      {"reduce_dtype = \"f16\"\nsharding_strategy = \"no_shard\"", 2, kFsdpF16Tolerance},
      {"param_dtype = \"f16\"\nreduce_dtype = \"f16\"", 4, kFsdpF16Tolerance},
  };
  const train::RunResult& none = cached(spec("gpt", "none", 1));
  for (const auto& c : cases) {
    const train::RunResult& result = cached(spec("gpt", "fsdp", c.world, c.options));
    ASSERT_EQ(result.last_step, 20) << c.options;
    expect_params_identical(result);
    std::string worst;
    EXPECT_LE(max_param_rel_diff(result.final_state[0], none.final_state[0], &worst), c.tolerance)
        << c.options << ": worst " << worst;
  }
}

// Every allgather and reduce-scatter carries 2 bytes per element instead
// of 4: the bytes sent per step halve, save the f64 norm allreduce.
TEST(FsdpDtype, Bf16HalvesTheBytesSent) {
  for (const std::string model : {"mlp", "gpt"}) {
    const std::map<std::string, int64_t> psi =
        unit_params(cached(spec(model, "none", 1)).final_state.at(0));
    for (const int world : {2, 4}) {
      const train::RunResult& f32 = cached(spec(model, "fsdp", world));
      const train::RunResult& bf16 = cached(spec(model, "fsdp", world, kBf16));
      ASSERT_FALSE(f32.logged.empty());
      ASSERT_FALSE(bf16.logged.empty());
      const int64_t norm = norm_bytes(world);
      EXPECT_EQ(f32.logged.back().comm_bytes, sharded_step_bytes(psi, per_unit(model), world));
      EXPECT_EQ(bf16.logged.back().comm_bytes,
                sharded_step_bytes(psi, per_unit(model), world, 2, 2));
      EXPECT_EQ(2 * (bf16.logged.back().comm_bytes - norm), f32.logged.back().comm_bytes - norm)
          << model << " on " << world;
      // Only one of the two in 16 bits: in between.
      const train::RunResult& params_only =
          cached(spec(model, "fsdp", world, "param_dtype = \"bf16\""));
      ASSERT_FALSE(params_only.logged.empty());
      EXPECT_EQ(params_only.logged.back().comm_bytes,
                sharded_step_bytes(psi, per_unit(model), world, 2, 4));
    }
  }
}

}  // namespace
}  // namespace tessera::test

// The sharded strategies against `none` on one rank: zero1, zero2 and
// zero3 on 1 to 4 ranks with uneven batches, fsdp full_shard,
// shard_grad_op and no_shard on 1 to 4 ranks and hybrid_shard on 4 ranks
// in groups of 2, on the mlp, gpt and llama models, 20 AdamW steps with
// clipping.
// Every rank ends with the same parameter bits, within a relative
// difference of 1e-5 of `none`; the ranks' optimizer pieces together cover
// every optimizer tensor; tracked persistent memory per rank follows the
// ZeRO formulas for f32 AdamW with S the padded shard over the sharding
// group G (Σ_u ceil(Ψ_u / G) for the per-unit strategies):
//   zero1: 4NS parameters and 4NS gradients (Ψ padded to N shards of
//   S = ceil(Ψ/N)), 8S optimizer state and no communication staging;
//   zero2: 4Ψ parameters, 4S gradients, 8S optimizer state;
//   zero3 and fsdp: 4S + 4S + 8S = 16S.
// zero1's merged state also equals ddp's on the same ranks bit for bit
// (the reduce-scatter sums each element in the same order as the
// allreduce, and an element-wise optimizer makes sharding exact).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "strategy_support.hpp"

namespace tessera::test {
namespace {

struct ShardedCase {
  std::string strategy;
  std::string model;
  int world;
  std::string sharding;  // fsdp's sharding_strategy; "" for the zero stages
  int group;             // ranks per sharding group
};

void PrintTo(const ShardedCase& c, std::ostream* os) {
  *os << c.strategy << "/" << (c.sharding.empty() ? "" : c.sharding + "/") << c.model << "/world"
      << c.world;
}

// The run of `c`, or of `none` on one rank with the same batch when
// `reference`.
RunSpec spec_of(const ShardedCase& c, bool reference) {
  if (c.strategy != "fsdp") {
    return reference ? uneven_spec(c.model, "none", 1) : uneven_spec(c.model, c.strategy, c.world);
  }
  if (reference) return spec(c.model, "none", 1);
  std::string options = "sharding_strategy = \"" + c.sharding + "\"";
  if (c.sharding == "hybrid_shard") options += "\nshard_group_size = " + std::to_string(c.group);
  return spec(c.model, "fsdp", c.world, options);
}

class ShardedEquivalence : public ::testing::TestWithParam<ShardedCase> {};

TEST_P(ShardedEquivalence, MatchesNoneWithShardedMemory) {
  const ShardedCase c = GetParam();
  const train::RunResult& result = cached(spec_of(c, false));
  const train::RunResult& none = cached(spec_of(c, true));
  ASSERT_EQ(result.last_step, 20);
  ASSERT_EQ(result.final_state.size(), static_cast<size_t>(c.world));

  expect_params_identical(result);
  std::string worst;
  const double diff = max_param_rel_diff(result.final_state[0], none.final_state[0], &worst);
  EXPECT_LE(diff, kTolerance) << "largest difference in " << worst;
  EXPECT_NEAR(result.final_loss, none.final_loss, 1e-4 * std::fabs(none.final_loss));
  const train::CollectedState all = merged(result);
  EXPECT_EQ(tensor_names(all), tensor_names(none.final_state[0]));

  // Persistent memory per rank; gathered units and gradient buffers are
  // COMM, transient.
  const auto psi = static_cast<int64_t>(result.plan.parameters);
  const int64_t shard = padded_shard(unit_params(none.final_state[0]), c.group);
  EXPECT_GE(shard * c.group, psi);
  PersistentBytes expected{4 * shard, 4 * shard, 8 * shard};
  if (c.strategy == "zero1") {
    const int64_t s = (psi + c.world - 1) / c.world;
    expected = {4 * s * c.world, 4 * s * c.world, 8 * s};
  } else if (c.strategy == "zero2") {
    expected.params = 4 * psi;
  }
  expect_persistent_peaks(result, c.world, expected);
  for (size_t r = 0; r < result.memory.size(); ++r) {
    const int64_t comm = result.memory[r].peak[TESSERA_MEM_COMM];
    if (c.strategy != "zero1" && c.group > 1) {
      EXPECT_GT(comm, 0) << "rank " << r;
    } else if (c.strategy == "fsdp" || c.strategy == "zero1") {
      EXPECT_EQ(comm, 0) << "rank " << r;
    }
  }

  if (c.strategy == "zero1") {
    // Parameters and optimizer state equal ddp's, bit for bit.
    const train::RunResult& ddp = cached(uneven_spec(c.model, "ddp", c.world));
    EXPECT_EQ(first_bit_difference(all, ddp.final_state[0]), "");
  }
}

std::vector<ShardedCase> cases() {
  std::vector<ShardedCase> out;
  for (const std::string model : {"mlp", "gpt", "llama"}) {
    for (int world = 1; world <= 4; ++world) {
      for (const std::string zero : {"zero1", "zero2", "zero3"}) {
        out.push_back({zero, model, world, "", world});
      }
      out.push_back({"fsdp", model, world, "full_shard", world});
      out.push_back({"fsdp", model, world, "shard_grad_op", world});
      out.push_back({"fsdp", model, world, "no_shard", 1});
    }
    out.push_back({"fsdp", model, 4, "hybrid_shard", 2});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Strategies, ShardedEquivalence, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<ShardedCase>& param_info) {
                           const ShardedCase& c = param_info.param;
                           return c.strategy + "_" + (c.sharding.empty() ? "" : c.sharding + "_") +
                                  c.model + "_world" + std::to_string(c.world);
                         });

}  // namespace
}  // namespace tessera::test

// `fsdp` options (its equivalence with `none` under every sharding
// strategy and its memory formula are in sharded_equivalence_test.cpp):
// invalid options are refused before any rank starts, naming the option;
// valid combinations are accepted.
#include <gtest/gtest.h>

#include <string>

#include "strategy_support.hpp"

namespace tessera::test {
namespace {

TEST(FsdpOptions, BadOptionsAreRefusedByName) {
  const struct {
    std::string options;
    std::string needle;
  } bad[] = {
      {"sharding_strategy = \"zero\"", "sharding_strategy"},
      {"sharding_strategy = \"hybrid_shard\"\nshard_group_size = 3", "shard_group_size"},
      {"shard_group_size = 2", "shard_group_size"},
      {"param_dtype = \"f8\"", "param_dtype"},
      {"reduce_dtype = \"f64\"", "reduce_dtype"},
      {"wrap = \"layer\"", "wrap"},
      {"wrap = \"min_params\"", "min_params"},
      {"wrap = \"min_params\"\nmin_params = -5", "min_params"},
      {"min_params = 100", "min_params"},
  };
  for (const auto& b : bad) {
    const std::string msg = refusal(spec("mlp", "fsdp", 4, b.options));
    EXPECT_NE(msg, "") << b.options;
    EXPECT_NE(msg.find(b.needle), std::string::npos) << b.options << ": " << msg;
  }
  for (const std::string good :
       {"sharding_strategy = \"no_shard\"", "wrap = \"min_params\"\nmin_params = 1",
        "param_dtype = \"bf16\"\nreduce_dtype = \"f16\""}) {
    EXPECT_EQ(refusal(spec("mlp", "fsdp", 4, good)), "") << good;
  }
}

}  // namespace
}  // namespace tessera::test

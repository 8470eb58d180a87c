// The `none` strategy runs on exactly one rank and says what to use
// instead on more.
#include <gtest/gtest.h>

#include <string>

#include "run_support.hpp"
#include "tessera/core/config.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

TEST(NoneStrategy, RefusesTwoRanksNamingTheWorldSizeAndDdp) {
  RunSpec spec;
  spec.strategy = "none";
  spec.world = 2;
  try {
    (void)train::plan_run(parse_config(config_toml(spec), "none2.toml"), registry());
    FAIL() << "world_size 2 was accepted by 'none'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(msg.rfind("strategy 'none' refused its options or world size (2 ranks): ", 0), 0U)
        << msg;
    EXPECT_NE(msg.find("world size is 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ddp"), std::string::npos) << msg;
    // The refusal is for the user: no source location of the plugin.
    EXPECT_EQ(msg.find(".cpp:"), std::string::npos) << msg;
  }
}

TEST(NoneStrategy, TrainsOnOneRankAndReportsNoCommunication) {
  RunSpec spec;
  spec.strategy = "none";
  spec.steps = 5;
  const train::RunResult result = run(spec);
  ASSERT_EQ(result.final_state.size(), 1U);
  ASSERT_FALSE(result.logged.empty());
  EXPECT_EQ(result.logged.back().comm_bytes, 0);
  EXPECT_GT(result.final_loss, 0.0);
  // Parameters and the two AdamW slots of every parameter were saved.
  const auto params = param_names(result.final_state[0]);
  EXPECT_EQ(tensor_names(result.final_state[0]).size(), 3 * params.size());
}

}  // namespace
}  // namespace tessera::test

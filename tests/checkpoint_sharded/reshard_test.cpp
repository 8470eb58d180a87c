// A sharded checkpoint written at step 10 on N ranks and resumed on M ranks
// (another world size, so every rank reads slices that other ranks wrote)
// reaches the parameters of the uninterrupted N-rank run after 20 steps,
// within 1e-5 relative difference (only the order of float additions
// differs between N and M), for ddp and every sharded strategy.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "sharded_support.hpp"
#include "tessera/core/train/checkpointing.hpp"

namespace tessera::test {
namespace {

constexpr double kTolerance = 1e-5;

struct ReshardCase {
  std::string strategy;
  std::string model;
  int saved_world = 2;
  int resumed_world = 3;
};

void PrintTo(const ReshardCase& c, std::ostream* os) {
  *os << c.strategy << "/" << c.model << "/" << c.saved_world << "to" << c.resumed_world;
}

class ShardedReshard : public ::testing::TestWithParam<ReshardCase> {};

TEST_P(ShardedReshard, ResumeContinuesToTheUninterruptedParameters) {
  const ReshardCase& c = GetParam();
  Scratch whole;
  Scratch cut;
  ResumedRuns runs;
  ASSERT_NO_FATAL_FAILURE(resume_at_other_world(checkpoint_spec(c.model, c.strategy, 1, 20, ""),
                                                c.saved_world, c.resumed_world, "sharded",
                                                whole.path(), cut.path(), &runs));

  std::string worst;
  const double diff = max_param_rel_diff(merged(runs.resumed), merged(runs.uninterrupted), &worst);
  EXPECT_LE(diff, kTolerance) << "largest difference in " << worst;

  // The resumed run's own checkpoint is sharded over its own world.
  const auto latest = train::find_latest_checkpoint(cut.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 20);
  EXPECT_EQ(latest->format, train::CheckpointFormat::sharded);
  EXPECT_EQ(latest->metadata.at("world_size"), std::to_string(c.resumed_world));
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, ShardedReshard,
    ::testing::Values(ReshardCase{"ddp", "mlp", 2, 3}, ReshardCase{"zero1", "mlp", 2, 3},
                      ReshardCase{"zero1", "gpt", 1, 2}, ReshardCase{"zero2", "gpt", 2, 3},
                      ReshardCase{"zero3", "mlp", 2, 3}, ReshardCase{"zero3", "gpt", 4, 2},
                      ReshardCase{"fsdp", "gpt", 2, 3}, ReshardCase{"fsdp", "mlp", 4, 2}),
    [](const ::testing::TestParamInfo<ReshardCase>& param_info) {
      const ReshardCase& c = param_info.param;
      return c.strategy + "_" + c.model + "_" + std::to_string(c.saved_world) + "to" +
             std::to_string(c.resumed_world);
    });

}  // namespace
}  // namespace tessera::test

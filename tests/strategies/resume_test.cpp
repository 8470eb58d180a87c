// Full checkpoints of every sharded strategy, saved at one world size,
// resume at another. Each rank saves its pieces of the parameters and of
// the optimizer slots, the host merges them into one file, and each rank
// of the new world reads back only the elements it owns (all parameters
// where they are replicated: zero1, zero2). A run of mlp (Ψ = 1461; the
// head's 125 parameters give padded pieces on 2, 3 and 4 ranks) stopped at
// step 10 on N ranks and continued on M ranks reaches the parameters of
// the uninterrupted N-rank run after 20 steps, within 1e-5 relative
// difference (only the order of float additions differs between N and
// M), and its ranks agree exactly. fsdp: full_shard saved on 2 ranks
// continues on 3, hybrid_shard (groups of 2) saved on 4 ranks continues on
// 2 (one group).
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "resume_support.hpp"
#include "strategy_support.hpp"

namespace tessera::test {
namespace {

struct ResumeCase {
  std::string name;
  std::string strategy;
  std::string options;
  int saved_world;
  int resumed_world;
};

void PrintTo(const ResumeCase& c, std::ostream* os) { *os << c.name; }

class StrategyResume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(StrategyResume, ContinuesAtAnotherWorldSizeToTheUninterruptedParameters) {
  const ResumeCase& c = GetParam();
  Scratch whole;
  Scratch cut;
  ResumedRuns runs;
  ASSERT_NO_FATAL_FAILURE(resume_at_other_world(spec("mlp", c.strategy, 1, c.options),
                                                c.saved_world, c.resumed_world, "full",
                                                whole.path(), cut.path(), &runs));
  const train::RunResult& resumed = runs.resumed;
  for (size_t r = 1; r < resumed.final_state.size(); ++r) {
    for (const std::string& name : param_names(resumed.final_state[0])) {
      EXPECT_EQ(max_rel_diff(resumed.final_state[r].full(name), resumed.final_state[0].full(name)),
                0.0)
          << "rank " << r << " differs from rank 0 in " << name;
    }
  }
  std::string worst;
  const double diff =
      max_param_rel_diff(resumed.final_state[0], runs.uninterrupted.final_state[0], &worst);
  EXPECT_LE(diff, kTolerance) << "largest difference in " << worst;
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, StrategyResume,
    ::testing::Values(
        ResumeCase{"zero1_2to3", "zero1", "", 2, 3}, ResumeCase{"zero1_4to2", "zero1", "", 4, 2},
        ResumeCase{"zero2_2to3", "zero2", "", 2, 3}, ResumeCase{"zero2_4to2", "zero2", "", 4, 2},
        ResumeCase{"zero3_2to3", "zero3", "", 2, 3}, ResumeCase{"zero3_4to2", "zero3", "", 4, 2},
        ResumeCase{"fsdp_full_shard_2to3", "fsdp", "sharding_strategy = \"full_shard\"", 2, 3},
        ResumeCase{"fsdp_hybrid_shard_4to2", "fsdp",
                   "sharding_strategy = \"hybrid_shard\"\nshard_group_size = 2", 4, 2}),
    [](const ::testing::TestParamInfo<ResumeCase>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace tessera::test

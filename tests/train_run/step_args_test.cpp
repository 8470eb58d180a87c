// What the run loop tells a strategy beyond the batches: the example and
// token counts of tessera_step_args (this rank's and the global batch's) and
// the step of tessera_state_writer, for checkpoints and for the final state.
// The test strategy `train_probe` (fixtures/probe_strategy.cpp) writes what
// it was given as one tensor per rank.
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "run_fixture.hpp"
#include "tessera/core/data/batch.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/train/checkpointing.hpp"

namespace tessera::test {
namespace {

using train::run_training;
using train::RunOptions;
using train::RunResult;

// {step, local examples, global examples, local tokens, global tokens,
// save step} as the probe wrote them for `rank`.
std::vector<float> probe_of(const train::CollectedState& state, int rank) {
  return state.full("probe.rank" + std::to_string(rank));
}

RunResult run_probe(const std::string& toml, const std::vector<std::string>& overrides) {
  std::ostringstream quiet;
  RunOptions options;
  options.out = &quiet;
  options.collect_final_state = true;
  return run_training(make_config(toml, overrides), with_fixtures(), options);
}

// A strategy that fails in a way it did not mean to (an exception it let
// out: TESSERA_ERR_INTERNAL) is named with its library, for its author.
TEST(StepArgs, AFailureOfThePluginItselfNamesItsLibrary) {
  ASSERT_NE(with_fixtures().find(TESSERA_KIND_STRATEGY, "train_probe"), nullptr);
  const std::string message = error_of(
      [] { (void)run_probe(mlp_toml("train_probe", 2, 3), {"strategy.options.fail_at_step=2"}); });
  EXPECT_NE(message.find("strategy 'train_probe' (rank "), std::string::npos) << message;
  EXPECT_NE(message.find(
                "step 2 (" +
                with_fixtures().get(TESSERA_KIND_STRATEGY, "train_probe")->path().string() + "): "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("the probe fails on purpose"), std::string::npos) << message;
}

TEST(StepArgs, CountEachRanksExamplesAndTheGlobalBatch) {
  ASSERT_NE(with_fixtures().find(TESSERA_KIND_STRATEGY, "train_probe"), nullptr);
  ScratchDir dir;
  // 16 examples over 3 data-parallel ranks (6, 5, 5), 2 micro-batches each.
  const RunResult result = run_probe(
      mlp_toml("train_probe", 3, 5),
      {"data.micro_batches=2", "checkpoint.dir=" + dir.path().string(), "checkpoint.every=2"});
  ASSERT_EQ(result.final_state.size(), 3U);
  const std::vector<int64_t> slices = split_sizes(16, 3);
  for (int rank = 0; rank < 3; ++rank) {
    const std::vector<float> p = probe_of(result.final_state[static_cast<size_t>(rank)], rank);
    ASSERT_EQ(p.size(), 6U);
    EXPECT_EQ(p[0], 5.0F) << "rank " << rank << ": the last step";
    EXPECT_EQ(p[1], static_cast<float>(slices[static_cast<size_t>(rank)])) << "rank " << rank;
    EXPECT_EQ(p[2], 16.0F) << "rank " << rank;
    EXPECT_EQ(p[3], 0.0F) << "rank " << rank << ": the mlp has no tokens";
    EXPECT_EQ(p[4], 0.0F) << "rank " << rank;
    EXPECT_EQ(p[5], 5.0F) << "rank " << rank << ": the final state is that of step 5";
  }
  // Checkpoints (saved without all replicas) are told their own step.
  for (const int step : {2, 4, 5}) {
    const auto file = dir / train::checkpoint_dir_name(step) / "model.safetensors";
    const auto reader = SafetensorsReader::open(file);
    for (int rank = 0; rank < 3; ++rank) {
      std::array<float, 6> p{};
      reader.read_f32("probe.rank" + std::to_string(rank), p);
      EXPECT_EQ(p[0], static_cast<float>(step)) << file << " rank " << rank;
      EXPECT_EQ(p[5], static_cast<float>(step)) << file << " rank " << rank;
    }
  }
}

TEST(StepArgs, CountTokensOfASequenceModel) {
  // 8 sequences of 8 tokens over 2 ranks.
  const RunResult result = run_probe(gpt_toml("train_probe", 2, 3), {});
  ASSERT_EQ(result.final_state.size(), 2U);
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<float> p = probe_of(result.final_state[static_cast<size_t>(rank)], rank);
    ASSERT_EQ(p.size(), 6U);
    EXPECT_EQ(p[1], 4.0F) << "rank " << rank;
    EXPECT_EQ(p[2], 8.0F) << "rank " << rank;
    EXPECT_EQ(p[3], 32.0F) << "rank " << rank;
    EXPECT_EQ(p[4], 64.0F) << "rank " << rank;
  }
}

TEST(StepArgs, ASaveBeforeAnyStepIsStepZero) {
  const RunResult result = run_probe(mlp_toml("train_probe", 2, 0), {});
  ASSERT_EQ(result.final_state.size(), 2U);
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<float> p = probe_of(result.final_state[static_cast<size_t>(rank)], rank);
    EXPECT_EQ(p[0], 0.0F) << "rank " << rank << ": no step ran";
    EXPECT_EQ(p[5], 0.0F) << "rank " << rank;
  }
}

}  // namespace
}  // namespace tessera::test

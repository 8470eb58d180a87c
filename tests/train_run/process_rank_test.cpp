// run_training on a process backend (this process is one rank, connected
// with -1): the test backend `train_solo` makes this process the whole
// world, which exercises the process path — the plan, the launcher's world
// size, the checkpoint gather by messages, the rank's failure — in one
// process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "run_fixture.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/train/checkpoint_dir.hpp"

namespace tessera::test {
namespace {

using train::run_training;
using train::RunOptions;
using train::RunResult;

std::string solo_mlp(int steps) {
  return mlp_toml("none", 1, steps) + "[backend]\nname = \"train_solo\"\n";
}

TEST(ProcessRank, TrainsLikeTheThreadRanksAndCheckpoints) {
  TESSERA_REQUIRE_STRATEGY("none");
  ASSERT_NE(with_fixtures().find(TESSERA_KIND_BACKEND, "train_solo"), nullptr);
  ScratchDir dir;
  std::ostringstream out;
  RunOptions options;
  options.out = &out;
  options.collect_final_state = true;
  const RunResult solo = run_training(
      make_config(solo_mlp(6), {"checkpoint.dir=" + dir.path().string(), "checkpoint.every=3"}),
      with_fixtures(), options);
  EXPECT_FALSE(solo.plan.thread_ranks);
  EXPECT_NE(out.str().find("process ranks (train_solo backend)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("summary: steps 1-6"), std::string::npos) << out.str();
  ASSERT_EQ(solo.final_state.size(), 1U);
  ASSERT_EQ(solo.logged.size(), 6U);
  EXPECT_EQ(solo.memory.size(), 1U);

  std::ostringstream quiet;
  RunOptions thread_options = options;
  thread_options.out = &quiet;
  const RunResult threads =
      run_training(make_config(mlp_toml("none", 1, 6)), plugins(), thread_options);
  expect_same_state(solo.final_state[0], threads.final_state[0]);
  EXPECT_EQ(solo.final_loss, threads.final_loss);

  EXPECT_EQ(solo.last_checkpoint, dir / "step-00000006" / "model.safetensors");
  const auto reader = SafetensorsReader::open(solo.last_checkpoint);
  EXPECT_EQ(reader.metadata().at("world_size"), "1");
  for (const auto& name : reader.names()) {
    std::vector<float> stored(reader.info(name).numel());
    reader.read_f32(name, stored);
    EXPECT_EQ(stored, solo.final_state[0].full(name)) << name;
  }
}

TEST(ProcessRank, AWorldSizeOtherThanTheLaunchersIsRefused) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  const std::string message = error_of([] {
    (void)run_training(make_config(solo_mlp(2), {"strategy.name=ddp", "run.world_size=2"}),
                       with_fixtures());
  });
  EXPECT_NE(message.find("rank 0: run.world_size = 2, but backend 'train_solo' started 1 ranks"),
            std::string::npos)
      << message;
}

TEST(ProcessRank, AFailureNamesTheRank) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  std::ofstream(dir / "step-00000002") << "in the way";
  std::ostringstream out;
  RunOptions options;
  options.out = &out;
  const std::string message = error_of([&] {
    (void)run_training(make_config(solo_mlp(2), {"checkpoint.dir=" + dir.path().string()}),
                       with_fixtures(), options);
  });
  EXPECT_EQ(message.rfind("rank 0: checkpoint: cannot create", 0), 0U) << message;
}

// Rank 0 of a process world takes checkpoint.dir's lock after connecting;
// held by another run, rank 0 fails naming the holder.
TEST(ProcessRank, RankZeroLocksTheCheckpointDir) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  const train::CheckpointDirLock held(dir.path());
  std::ostringstream out;
  RunOptions options;
  options.out = &out;
  const std::string message = error_of([&] {
    (void)run_training(make_config(solo_mlp(2), {"checkpoint.dir=" + dir.path().string()}),
                       with_fixtures(), options);
  });
  EXPECT_EQ(message.rfind("rank 0: checkpoint.dir '" + dir.path().string() +
                              "' is in use by another run (pid " + std::to_string(::getpid()),
                          0),
            0U)
      << message;
  EXPECT_EQ(out.str().find("step "), std::string::npos) << out.str();
}

}  // namespace
}  // namespace tessera::test

// Checkpoints written by run_training: the directory layout, the `latest`
// file, the tensors and metadata, and resume giving exactly the state of an
// uninterrupted run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_fixture.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/train/checkpointing.hpp"

namespace tessera::test {
namespace {

using train::run_training;
using train::RunOptions;
using train::RunResult;

RunOptions quiet_collecting(std::ostringstream& out) {
  RunOptions options;
  options.out = &out;
  options.collect_final_state = true;
  return options;
}

// Runs `toml` for 6 steps with a checkpoint every 3 into `dir`.
RunResult run_six(const std::string& toml, const std::filesystem::path& dir,
                  std::vector<std::string> extra = {}) {
  extra.push_back("checkpoint.dir=" + dir.string());
  extra.push_back("checkpoint.every=3");
  std::ostringstream out;
  return run_training(make_config(toml, extra), plugins(), quiet_collecting(out));
}

void expect_resume_equals_uninterrupted(const std::string& toml) {
  ScratchDir whole;
  const RunResult uninterrupted = run_six(toml, whole.path());
  ASSERT_FALSE(uninterrupted.final_state.empty());

  // A second directory holding only the step-3 checkpoint, as if the first
  // run had stopped there.
  ScratchDir cut;
  std::filesystem::copy(whole / "step-00000003", cut / "step-00000003");
  std::ofstream(cut / "latest") << "step-00000003\n";
  const RunResult resumed = run_six(toml, cut.path(), {"checkpoint.resume=true"});

  EXPECT_EQ(resumed.first_step, 4);
  EXPECT_EQ(resumed.last_step, 6);
  EXPECT_EQ(resumed.plan.resume_step, 3);
  ASSERT_EQ(resumed.final_state.size(), uninterrupted.final_state.size());
  for (size_t rank = 0; rank < resumed.final_state.size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    expect_same_state(uninterrupted.final_state[rank], resumed.final_state[rank]);
  }
  EXPECT_EQ(uninterrupted.final_loss, resumed.final_loss);
  // Both wrote the step-6 checkpoint, byte for byte the same.
  EXPECT_EQ(read_text(whole / "step-00000006" / "model.safetensors"),
            read_text(cut / "step-00000006" / "model.safetensors"));
}

TEST(Resume, MlpEqualsTheUninterruptedRun) {
  TESSERA_REQUIRE_STRATEGY("none");
  expect_resume_equals_uninterrupted(mlp_toml("none", 1, 6));
}

TEST(Resume, GptWithWarmupAndClippingEqualsTheUninterruptedRun) {
  TESSERA_REQUIRE_STRATEGY("none");
  expect_resume_equals_uninterrupted(gpt_toml("none", 1, 6));
}

TEST(Resume, DdpOnThreeRanksEqualsTheUninterruptedRun) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  expect_resume_equals_uninterrupted(gpt_toml("ddp", 3, 6));
}

TEST(Resume, AtTheLastStepThereIsNothingToRun) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  (void)run_six(mlp_toml("none", 1, 6), dir.path());
  std::ostringstream out;
  RunOptions options;
  options.out = &out;
  const RunResult again =
      run_training(make_config(mlp_toml("none", 1, 6),
                               {"checkpoint.dir=" + dir.path().string(), "checkpoint.resume=true"}),
                   plugins(), options);
  EXPECT_EQ(again.first_step, 7);
  EXPECT_EQ(again.last_step, 6);
  EXPECT_TRUE(again.logged.empty());
  EXPECT_TRUE(again.last_checkpoint.empty());
  EXPECT_NE(out.str().find("no steps to run"), std::string::npos) << out.str();
}

TEST(Checkpoints, LayoutLatestTensorsAndMetadata) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  const RunResult result = run_six(mlp_toml("none", 1, 6), dir.path());
  EXPECT_EQ(result.last_checkpoint, dir / "step-00000006" / "model.safetensors");
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "step-00000003" / "model.safetensors"));
  EXPECT_EQ(read_text(dir / "latest"), "step-00000006\n");
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos)
        << "temporary file left: " << entry.path();
  }

  const auto reader = SafetensorsReader::open(result.last_checkpoint);
  const std::vector<std::string> expected = {"layer0.w",
                                             "layer0.b",
                                             "head.w",
                                             "head.b",
                                             "optim.layer0.w.exp_avg",
                                             "optim.layer0.w.exp_avg_sq",
                                             "optim.layer0.b.exp_avg",
                                             "optim.layer0.b.exp_avg_sq",
                                             "optim.head.w.exp_avg",
                                             "optim.head.w.exp_avg_sq",
                                             "optim.head.b.exp_avg",
                                             "optim.head.b.exp_avg_sq"};
  EXPECT_EQ(reader.names(), expected);
  EXPECT_EQ(reader.info("layer0.w").shape, (std::vector<uint64_t>{8, 16}));
  const auto& meta = reader.metadata();
  EXPECT_EQ(meta.at("step"), "6");
  EXPECT_EQ(meta.at("world_size"), "1");
  EXPECT_EQ(meta.at("strategy"), "none");
  EXPECT_EQ(meta.at("model"), "mlp");
  EXPECT_EQ(meta.at("optimizer"), "adamw");
  EXPECT_EQ(meta.at("seed"), "42");

  // The file holds the final state.
  ASSERT_EQ(result.final_state.size(), 1U);
  for (const auto& name : expected) {
    std::vector<float> stored(reader.info(name).numel());
    reader.read_f32(name, stored);
    EXPECT_EQ(stored, result.final_state[0].full(name)) << name;
  }

  const auto latest = train::find_latest_checkpoint(dir.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 6);
  EXPECT_EQ(latest->file, result.last_checkpoint);

  // A damaged record of the world size (the run reshards by it) is refused.
  for (const char* world : {"x", "0", "-2", "3 "}) {
    SafetensorsWriter damaged;
    for (const auto& [key, value] : meta) damaged.set_metadata(key, value);
    damaged.set_metadata("world_size", world);
    for (const std::string& name : reader.names()) {
      const TensorInfo& info = reader.info(name);
      damaged.add(name, info.dtype, info.shape, reader.data(name).data());
    }
    const auto copy = dir / "damaged" / train::checkpoint_dir_name(6) / "model.safetensors";
    std::filesystem::create_directories(copy.parent_path());
    damaged.save(copy);
    train::write_latest(dir / "damaged", 6);
    const std::string message =
        error_of([&] { (void)train::find_latest_checkpoint(dir / "damaged"); });
    EXPECT_NE(message.find("records world_size '" + std::string(world) +
                           "', which is not a number of ranks"),
              std::string::npos)
        << message;
  }
}

// With several ranks every rank's pieces are merged into the one file.
TEST(Checkpoints, DdpRanksMergeIntoOneFile) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  ScratchDir dir;
  const RunResult result = run_six(mlp_toml("ddp", 3, 6), dir.path());
  ASSERT_EQ(result.final_state.size(), 3U);
  const auto reader = SafetensorsReader::open(result.last_checkpoint);
  EXPECT_EQ(reader.metadata().at("world_size"), "3");
  for (const auto& name : reader.names()) {
    std::vector<float> stored(reader.info(name).numel());
    reader.read_f32(name, stored);
    for (const auto& state : result.final_state) EXPECT_EQ(stored, state.full(name)) << name;
  }
}

}  // namespace
}  // namespace tessera::test

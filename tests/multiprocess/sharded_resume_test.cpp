// Sharded checkpoints across process ranks: `zero3` on the tiny gpt, two
// process ranks (gloo under `tessera launch`, or Open MPI under mpirun),
// writes a sharded checkpoint at step 10 of a 20-step run — every rank its
// own file, rank 0 the index. `zero2` on three process ranks resumes that
// checkpoint (each rank reads the element ranges it owns from files the
// other world size wrote) and runs to step 20. Its last checkpoint, turned
// into one file by `tessera checkpoint convert --to full`, holds the
// parameters and optimizer state of an uninterrupted 20-step in-memory run
// of the same config (ranks as threads), within 1e-5 relative difference per
// tensor: only the order of float additions differs between the worlds and
// engines.
//
// The learning rate follows a schedule over `run.steps`, so a run of 10
// steps is not the first half of a run of 20: the first run goes to step 20
// and the resumed run starts from a copy of its step-10 checkpoint.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "checkpoint_tensors.hpp"
#include "engines.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/safetensors_index.hpp"
#include "tessera/core/train/checkpointing.hpp"

namespace tessera::mptest {
namespace {

constexpr int kSavedRanks = 2;
constexpr int kResumedRanks = 3;
constexpr int kSavedStep = 10;
constexpr int kFinalStep = 20;
constexpr auto kRunLimit = std::chrono::minutes(2);

// One `tessera train` run of the shared 20-step config (sharded checkpoints
// every 10 steps): which strategy on how many ranks of which engine, into
// which checkpoint directory.
struct Run {
  Engine engine = Engine::kInmemory;
  int ranks = 1;
  std::string strategy;
  bool resume = false;
  std::filesystem::path ckpt;
  std::string tag;  // names the log file and the launch
};

// Runs `r` with the config at `config`, its output going to `dir`/<tag>.log.
// Records a test failure (with the log) unless the run exits cleanly; returns
// the log text. mpirun with --enable-recovery exits 0 whatever its ranks did,
// so callers also check the checkpoint the run had to write.
std::string train(const Run& r, const std::filesystem::path& config,
                  const std::filesystem::path& dir) {
  const auto log = dir / (r.tag + ".log");
  const std::vector<std::string> sets = {
      "strategy.name=\"" + r.strategy + "\"", "strategy.options={}",
      "checkpoint.format=\"sharded\"", "checkpoint.dir=\"" + r.ckpt.string() + "\"",
      std::string("checkpoint.resume=") + (r.resume ? "true" : "false")};
  ChildProcess child(train_command(r.engine, r.ranks, config, sets, r.tag), launched(log));
  const ChildExit exit = child.wait(kRunLimit);
  const std::string text = read_text(log);
  EXPECT_TRUE(exit.ok()) << r.tag << " run " << exit.describe() << ":\n" << text;
  return text;
}

// The latest checkpoint in `ckpt`; a test failure (and nullopt) when there
// is none, or it is not a sharded checkpoint of `step` written by `world`
// ranks.
std::optional<train::CheckpointInfo> latest_sharded(const std::filesystem::path& ckpt, int64_t step,
                                                    int world) {
  auto latest = train::find_latest_checkpoint(ckpt);
  if (!latest) {
    ADD_FAILURE() << "no checkpoint in " << ckpt;
    return std::nullopt;
  }
  const bool as_expected = latest->step == step &&
                           latest->format == train::CheckpointFormat::sharded &&
                           latest->metadata.at("world_size") == std::to_string(world);
  EXPECT_TRUE(as_expected) << latest->file << ": step " << latest->step << ", world_size "
                           << latest->metadata.at("world_size") << "; expected a sharded "
                           << "checkpoint of step " << step << " by " << world << " ranks";
  if (!as_expected) return std::nullopt;
  return latest;
}

// Names of the `rank*.safetensors` files in `step_dir`.
std::set<std::string> rank_files_in(const std::filesystem::path& step_dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(step_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank", 0) == 0 && entry.path().extension() == ".safetensors") {
      names.insert(name);
    }
  }
  return names;
}

// Every tensor of a sharded checkpoint, assembled from its rank files.
Tensors tensors_of_index(const std::filesystem::path& index) {
  ShardedCheckpoint ckpt = ShardedCheckpoint::open(index);
  Tensors out;
  for (const auto& [name, t] : ckpt.index().tensors) {
    EXPECT_EQ(t.dtype, TESSERA_F32) << index << ": " << name;
    std::vector<float> values(shape_numel(t.shape));
    ckpt.read(name, 0, std::span<float>(values));
    out.emplace(name, std::move(values));
  }
  return out;
}

class ShardedResume : public ::testing::TestWithParam<Engine> {};

TEST_P(ShardedResume, SavedOnTwoProcessRanksResumedOnThreeMatchesUninterrupted) {
  const Engine engine = GetParam();
  if (const std::string why = engine_unavailable(engine); !why.empty()) GTEST_SKIP() << why;
  const std::string name = engine_name(engine);
  const TempDir dir("sharded-resume-" + name);
  const auto config = write_gpt_config(dir.path(), kFinalStep, kSavedStep, 30.0);

  // zero3 on two process ranks; its step-10 checkpoint is the one resumed.
  const auto saved = dir.path() / "saved";
  train({engine, kSavedRanks, "zero3", false, saved, "save-" + name}, config, dir.path());
  ASSERT_FALSE(HasFailure());
  const auto step_dir = saved / train::checkpoint_dir_name(kSavedStep);
  const ShardedIndex index = read_index(step_dir / "index.json");
  EXPECT_EQ(index.world_size, kSavedRanks);
  EXPECT_EQ(index.metadata.at("strategy"), "zero3");
  const std::set<std::string> expected_files = {shard_file_name(0), shard_file_name(1)};
  EXPECT_EQ(rank_files_in(step_dir), expected_files) << step_dir;
  // zero3 shards every tensor evenly: the index lists both files and no
  // other, and both hold elements.
  std::set<std::string> listed;
  std::set<std::string> holding;
  for (const auto& [tensor, t] : index.tensors) {
    for (const auto& slice : t.slices) {
      listed.insert(slice.file);
      if (slice.count > 0) holding.insert(slice.file);
    }
  }
  EXPECT_EQ(listed, expected_files);
  EXPECT_EQ(holding, expected_files);

  // zero2 on three process ranks resumes a copy of it and runs to step 20.
  const auto resumed = dir.path() / "resumed";
  std::filesystem::create_directories(resumed);
  std::filesystem::copy(step_dir, resumed / step_dir.filename());
  train::write_latest(resumed, kSavedStep);
  const std::string resumed_log =
      train({engine, kResumedRanks, "zero2", true, resumed, "resume-" + name}, config, dir.path());
  EXPECT_NE(resumed_log.find("resharding 2 -> 3 ranks"), std::string::npos) << resumed_log;
  const auto last = latest_sharded(resumed, kFinalStep, kResumedRanks);
  ASSERT_TRUE(last.has_value()) << resumed_log;
  EXPECT_EQ(rank_files_in(last->file.parent_path()).size(), static_cast<size_t>(kResumedRanks));

  // The reference: the same config, uninterrupted, ranks as threads.
  const auto reference_dir = dir.path() / "reference";
  train({Engine::kInmemory, kSavedRanks, "zero3", false, reference_dir, "reference-" + name},
        config, dir.path());
  const auto reference = latest_sharded(reference_dir, kFinalStep, kSavedRanks);
  ASSERT_TRUE(reference.has_value());
  const Tensors expected = tensors_of_index(reference->file);

  // The resumed run's last checkpoint as one file, through the command line.
  const auto full = dir.path() / "resumed.safetensors";
  const auto convert_log = dir.path() / "convert.log";
  ChildProcess convert({TESSERA_MP_TESSERA, "checkpoint", "convert", "--to", "full",
                        resumed.string(), full.string()},
                       launched(convert_log));
  const ChildExit converted = convert.wait(kRunLimit);
  ASSERT_TRUE(converted.ok()) << "checkpoint convert " << converted.describe() << ":\n"
                              << read_text(convert_log);
  expect_close(tensors_of_file(full), expected,
               "zero2 on 3 " + name + " ranks resumed from zero3 on 2, converted");

  // The uninterrupted process run ends there too.
  const auto whole = latest_sharded(saved, kFinalStep, kSavedRanks);
  ASSERT_TRUE(whole.has_value());
  expect_close(tensors_of_index(whole->file), expected,
               "zero3 on 2 " + name + " ranks, uninterrupted");
}

INSTANTIATE_TEST_SUITE_P(Backends, ShardedResume, ::testing::Values(Engine::kMpi, Engine::kGloo),
                         engine_param_name<::testing::TestParamInfo<Engine>>);

}  // namespace
}  // namespace tessera::mptest

// What a sharded checkpoint looks like on disk: an index listing every
// tensor with slices that cover it exactly, one file per rank holding about
// 1/N of the state for a sharded strategy, nothing left of an earlier
// attempt at the same step, and `latest` untouched when a write fails.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sharded_support.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/safetensors_index.hpp"
#include "tessera/core/train/checkpointing.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

namespace fs = std::filesystem;

RunSpec sharded_spec(const std::string& strategy, int world, int64_t steps, const fs::path& dir,
                     int64_t every = 0, bool resume = false) {
  return checkpoint_spec("mlp", strategy, world, steps,
                         checkpoint_toml(dir, every, "sharded", resume));
}

std::string text_of(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ShardedIndex, ListsEveryTensorWithSlicesCoveringItExactly) {
  Scratch dir;
  const train::RunResult result = run(sharded_spec("zero3", 4, 2, dir.path()));
  const fs::path index_path = dir / "step-00000002" / "index.json";
  ASSERT_EQ(result.last_checkpoint, index_path);
  EXPECT_EQ(text_of(dir / "latest"), "step-00000002\n");

  const ShardedIndex index = read_index(index_path);  // validates coverage too
  EXPECT_EQ(index.world_size, 4);
  EXPECT_EQ(index.metadata.at("format"), "sharded");
  EXPECT_EQ(index.metadata.at("step"), "2");
  EXPECT_EQ(index.metadata.at("strategy"), "zero3");

  const train::CollectedState state = merged(result);
  std::vector<std::string> listed;
  for (const auto& [name, tensor] : index.tensors) listed.push_back(name);
  EXPECT_EQ(listed, tensor_names(state));

  std::set<std::string> files;
  ShardedCheckpoint checkpoint = ShardedCheckpoint::open(index_path);
  for (const auto& [name, tensor] : index.tensors) {
    uint64_t covered = 0;
    for (const ShardSlice& slice : tensor.slices) {
      covered += slice.count;
      files.insert(slice.file);
    }
    EXPECT_EQ(covered, shape_numel(tensor.shape)) << name;
    // The checkpoint of the last step holds the final state, bit for bit.
    std::vector<float> values(shape_numel(tensor.shape));
    checkpoint.read<float>(name, 0, std::span<float>(values));
    const std::vector<float> expected = state.full(name);
    EXPECT_EQ(std::memcmp(values.data(), expected.data(), values.size() * sizeof(float)), 0)
        << name;
  }
  EXPECT_EQ(files, (std::set<std::string>{"rank00000.safetensors", "rank00001.safetensors",
                                          "rank00002.safetensors", "rank00003.safetensors"}));

  // zero3 shards parameters and optimizer state: each file about 1/4.
  uintmax_t total = 0;
  std::vector<uintmax_t> sizes;
  for (const std::string& file : files) {
    sizes.push_back(fs::file_size(index_path.parent_path() / file));
    total += sizes.back();
  }
  for (size_t r = 0; r < sizes.size(); ++r) {
    EXPECT_GT(static_cast<double>(sizes[r]), 0.15 * static_cast<double>(total)) << "rank " << r;
    EXPECT_LT(static_cast<double>(sizes[r]), 0.35 * static_cast<double>(total)) << "rank " << r;
    const SafetensorsReader reader =
        SafetensorsReader::open(index_path.parent_path() / shard_file_name(static_cast<int>(r)));
    EXPECT_EQ(reader.metadata().at("rank"), std::to_string(r));
  }
}

TEST(ShardedIndex, FilesOfAnEarlierAttemptAtTheStepAreRemoved) {
  Scratch dir;
  const fs::path step_dir = dir / "step-00000002";
  fs::create_directories(step_dir);
  for (const char* name : {"index.json", "rank00007.safetensors", "model.safetensors",
                           "rank00000.safetensors.tmp.1.2", "index.json.tmp.3.4"}) {
    std::ofstream(step_dir / name) << "left by a crashed attempt";
  }
  std::ofstream(step_dir / "notes.txt") << "not a checkpoint file";

  const train::RunResult result = run(sharded_spec("zero2", 2, 2, dir.path()));
  ASSERT_EQ(result.last_step, 2);
  std::set<std::string> left;
  for (const auto& entry : fs::directory_iterator(step_dir)) {
    left.insert(entry.path().filename().string());
  }
  EXPECT_EQ(left, (std::set<std::string>{"index.json", "notes.txt", "rank00000.safetensors",
                                         "rank00001.safetensors"}));
  const auto latest = train::find_latest_checkpoint(dir.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->format, train::CheckpointFormat::sharded);
}

TEST(ShardedIndex, FailedWriteLeavesLatestOnThePreviousCheckpoint) {
  Scratch dir;
  ASSERT_EQ(run(sharded_spec("zero3", 2, 3, dir.path(), 3)).last_step, 3);
  ASSERT_EQ(text_of(dir / "latest"), "step-00000003\n");

  // A file where the step-6 directory must go: rank 0 cannot create it.
  std::ofstream(dir / "step-00000006") << "in the way";
  const std::string message =
      error_of([&] { (void)run(sharded_spec("zero3", 3, 6, dir.path(), 3, true)); });
  EXPECT_NE(message.find("step-00000006"), std::string::npos) << message;
  EXPECT_EQ(text_of(dir / "latest"), "step-00000003\n");

  // Nothing was lost: the run resumes from step 3 once the way is clear.
  fs::remove(dir / "step-00000006");
  const train::RunResult resumed = run(sharded_spec("zero3", 3, 6, dir.path(), 3, true));
  EXPECT_EQ(resumed.first_step, 4);
  EXPECT_EQ(text_of(dir / "latest"), "step-00000006\n");
}

TEST(ShardedIndex, ResumeChecksTheRankFiles) {
  Scratch dir;
  ASSERT_EQ(run(sharded_spec("zero1", 2, 2, dir.path())).last_step, 2);
  const fs::path step_dir = dir / "step-00000002";

  // A rank file without the keys the index lists.
  const std::vector<float> one{1.0f};
  SafetensorsWriter writer;
  writer.add<float>("unrelated", {1}, std::span<const float>(one));
  writer.save(step_dir / "rank00001.safetensors");
  std::string message = error_of([&] { (void)train::find_latest_checkpoint(dir.path()); });
  EXPECT_NE(message.find("rank00001.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("has no tensor"), std::string::npos) << message;

  // A full file beside the index: which one is the checkpoint is unclear.
  writer.save(step_dir / "model.safetensors");
  message = error_of([&] { (void)train::find_latest_checkpoint(dir.path()); });
  EXPECT_NE(message.find("holds both"), std::string::npos) << message;
}

// A rank file copied in from another step or run has the keys and sizes
// the index lists, but not its record: resuming from it would mix states.
TEST(ShardedIndex, ResumeRefusesARankFileOfAnotherCheckpoint) {
  Scratch dir;
  ASSERT_EQ(run(sharded_spec("zero1", 2, 4, dir.path(), 2)).last_step, 4);
  const fs::path stale = dir / "step-00000002" / "rank00001.safetensors";
  const fs::path target = dir / "step-00000004" / "rank00001.safetensors";
  fs::copy_file(stale, target, fs::copy_options::overwrite_existing);
  const std::string message = error_of([&] { (void)train::find_latest_checkpoint(dir.path()); });
  EXPECT_NE(message.find("rank file '" + target.string() + "' records step 2, but index '" +
                         (dir / "step-00000004" / "index.json").string() + "' records step 4"),
            std::string::npos)
      << message;

  // Rank 1's own file, its record rewritten.
  fs::copy_file(dir / "step-00000002" / "rank00001.safetensors", target,
                fs::copy_options::overwrite_existing);
  const auto rewrite_rank = [&](const std::string& rank) {
    const fs::path original = dir / "step-00000004" / "rank00001.original";
    fs::copy_file(target, original, fs::copy_options::overwrite_existing);
    const SafetensorsReader reader = SafetensorsReader::open(original);
    SafetensorsWriter writer;
    for (const auto& [key, value] : reader.metadata()) writer.set_metadata(key, value);
    writer.set_metadata("step", "4");
    writer.set_metadata("rank", rank);
    for (const std::string& name : reader.names()) {
      const TensorInfo& info = reader.info(name);
      writer.add(name, info.dtype, info.shape, reader.data(name).data());
    }
    writer.save(target);
  };
  rewrite_rank("1");
  EXPECT_NO_THROW((void)train::find_latest_checkpoint(dir.path()));  // the record fits again
  rewrite_rank("0");
  EXPECT_NE(
      error_of([&] {
        (void)train::find_latest_checkpoint(dir.path());
      }).find("rank file '" + target.string() + "' records rank '0', but its name says rank 1"),
      std::string::npos);
  rewrite_rank("x");
  EXPECT_NE(error_of([&] {
              (void)train::find_latest_checkpoint(dir.path());
            }).find("records rank 'x', but that is not a rank number"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::test

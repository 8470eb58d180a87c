// `convert_to_full` (behind `tessera checkpoint convert --to full`): the
// converted file equals the full checkpoint the same run writes, tensor for
// tensor and bit for bit, in the same order; it seeds a run through
// model.init or as a step's model.safetensors; bad inputs name the path.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "sharded_support.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/train/checkpointing.hpp"
#include "tessera/core/train/sharded_checkpoint.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

namespace fs = std::filesystem;

RunSpec gpt_spec(const std::string& strategy, int world, int64_t steps, const std::string& toml) {
  return checkpoint_spec("gpt", strategy, world, steps, toml);
}

void expect_same_file_content(const fs::path& a_path, const fs::path& b_path) {
  const SafetensorsReader a = SafetensorsReader::open(a_path);
  const SafetensorsReader b = SafetensorsReader::open(b_path);
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names()) {
    EXPECT_EQ(a.info(name).dtype, b.info(name).dtype) << name;
    EXPECT_EQ(a.info(name).shape, b.info(name).shape) << name;
    const auto x = a.data(name);
    const auto y = b.data(name);
    ASSERT_EQ(x.size(), y.size()) << name;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size()), 0) << name << " differs";
  }
}

TEST(ShardedConvert, EqualsTheFullCheckpointOfTheSameRun) {
  Scratch full_dir;
  Scratch sharded_dir;
  Scratch out;
  (void)run(gpt_spec("zero2", 2, 4, checkpoint_toml(full_dir.path(), 0, "full", false)));
  (void)run(gpt_spec("zero2", 2, 4, checkpoint_toml(sharded_dir.path(), 0, "sharded", false)));
  const fs::path full_file = full_dir / "step-00000004" / "model.safetensors";

  // Any of the three ways to name the input gives the same file.
  const fs::path inputs[] = {sharded_dir.path(), sharded_dir / "step-00000004",
                             sharded_dir / "step-00000004" / "index.json"};
  for (size_t i = 0; i < std::size(inputs); ++i) {
    const fs::path converted = out / ("converted" + std::to_string(i) + ".safetensors");
    const train::ConversionSummary summary = train::convert_to_full(inputs[i], converted);
    EXPECT_EQ(summary.index, sharded_dir / "step-00000004" / "index.json");
    EXPECT_EQ(summary.world_size, 2);
    expect_same_file_content(converted, full_file);
    EXPECT_EQ(summary.tensors, SafetensorsReader::open(full_file).names().size());
  }

  auto expected = SafetensorsReader::open(full_file).metadata();
  expected["format"] = "full";
  EXPECT_EQ(SafetensorsReader::open(out / "converted0.safetensors").metadata(), expected);
}

TEST(ShardedConvert, ConvertedFileSeedsRuns) {
  Scratch sharded_dir;
  Scratch out;
  (void)run(gpt_spec("zero3", 3, 4, checkpoint_toml(sharded_dir.path(), 0, "sharded", false)));
  const fs::path converted = out / "full.safetensors";
  (void)train::convert_to_full(sharded_dir.path(), converted);

  // As step-4's model.safetensors: resuming from it equals resuming from the
  // sharded checkpoint itself, bit for bit.
  Scratch as_full;
  fs::create_directories(as_full / "step-00000004");
  fs::copy_file(converted, as_full / "step-00000004" / "model.safetensors");
  std::ofstream(as_full / "latest") << "step-00000004\n";
  const train::RunResult from_full =
      run(gpt_spec("fsdp", 2, 6, checkpoint_toml(as_full.path(), 0, "full", true)));
  const train::RunResult from_sharded =
      run(gpt_spec("fsdp", 2, 6, checkpoint_toml(sharded_dir.path(), 0, "sharded", true)));
  ASSERT_EQ(from_full.first_step, 5);
  ASSERT_EQ(from_sharded.first_step, 5);
  EXPECT_EQ(first_bit_difference(merged(from_full), merged(from_sharded)), "");

  // Through model.init: the parameters start a new run (optimizer state in
  // the file is ignored).
  std::string toml = config_toml(gpt_spec("ddp", 2, 2, ""));
  const std::string marker = "[model]\n";
  toml.insert(toml.find(marker) + marker.size(), "init = \"" + converted.generic_string() + "\"\n");
  std::ostringstream log;
  train::RunOptions options;
  options.out = &log;
  const train::RunResult seeded =
      train::run_training(parse_config(toml, "convert_test.toml"), registry(), options);
  EXPECT_EQ(seeded.last_step, 2);
  EXPECT_EQ(seeded.plan.init_file, converted);
}

TEST(ShardedConvert, BadInputsNameThePath) {
  Scratch dir;
  std::string message =
      error_of([&] { (void)train::convert_to_full(dir / "absent", dir / "out.safetensors"); });
  EXPECT_NE(message.find((dir / "absent").string()), std::string::npos) << message;

  message = error_of([&] { (void)train::convert_to_full(dir.path(), dir / "out.safetensors"); });
  EXPECT_NE(message.find("neither an index.json"), std::string::npos) << message;

  Scratch full_dir;
  (void)run(gpt_spec("ddp", 1, 1, checkpoint_toml(full_dir.path(), 0, "full", false)));
  message =
      error_of([&] { (void)train::convert_to_full(full_dir.path(), dir / "out.safetensors"); });
  EXPECT_NE(message.find("a full checkpoint already"), std::string::npos) << message;

  Scratch sharded_dir;
  (void)run(gpt_spec("zero1", 2, 1, checkpoint_toml(sharded_dir.path(), 0, "sharded", false)));
  const fs::path unwritable = dir / "no" / "such" / "dir" / "out.safetensors";
  message = error_of([&] { (void)train::convert_to_full(sharded_dir.path(), unwritable); });
  EXPECT_NE(message.find(unwritable.string()), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(unwritable));

  // A file of the full checkpoint, or a rank file, is not an index.
  const fs::path full_file = full_dir / "step-00000001" / "model.safetensors";
  message = error_of([&] { (void)train::convert_to_full(full_file, dir / "out.safetensors"); });
  EXPECT_NE(message.find("'" + full_file.string() +
                         "' is a safetensors file, not a sharded index: a full checkpoint "
                         "already (nothing to convert)"),
            std::string::npos)
      << message;
  const fs::path step = sharded_dir / "step-00000001";
  message = error_of([&] {
    (void)train::convert_to_full(step / "rank00001.safetensors", dir / "out.safetensors");
  });
  EXPECT_NE(message.find("give the index.json beside it"), std::string::npos) << message;

  // Writing over a file the conversion reads is refused, and leaves it.
  const auto text_of = [](const fs::path& file) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const std::string index_text = text_of(step / "index.json");
  for (const fs::path& input : {step / "index.json", step / "rank00001.safetensors"}) {
    message = error_of([&] { (void)train::convert_to_full(step, input); });
    EXPECT_NE(message.find("a file of the checkpoint being converted"), std::string::npos)
        << message;
  }
  EXPECT_EQ(text_of(step / "index.json"), index_text);
  // And so is writing over the checkpoint directory's `latest`, from the
  // directory or from the step.
  const fs::path latest = sharded_dir.path() / "latest";
  const std::string latest_text = text_of(latest);
  for (const fs::path& in : {sharded_dir.path(), step}) {
    message = error_of([&] { (void)train::convert_to_full(in, latest); });
    EXPECT_NE(message.find("the pointer to the checkpoint being converted"), std::string::npos)
        << message;
  }
  EXPECT_EQ(text_of(latest), latest_text);
  EXPECT_NO_THROW((void)train::find_latest_checkpoint(sharded_dir.path()));
}

}  // namespace
}  // namespace tessera::test

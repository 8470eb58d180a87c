// Sharded checkpoints written before box slices (index format version 1:
// no "version", flat slices only) still load: the index reads, every tensor
// assembles by range and by box, a state source reads them, and the
// conversion to one full file works. The checkpoint is a checked-in fixture
// (fixtures/sharded_v1, see its README).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "file_bytes.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/safetensors_index.hpp"
#include "tessera/core/train/checkpointing.hpp"
#include "tessera/core/train/sharded_checkpoint.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;

const fs::path kFixture = fs::path(TESSERA_CHECKPOINT_FIXTURES) / "sharded_v1";
const fs::path kIndex = kFixture / "step-00000003" / "index.json";

// Element i of each fixture tensor (see the fixture's README).
std::vector<float> expected(const std::string& name) {
  std::vector<float> v;
  if (name == "layer.w") {
    for (int i = 0; i < 12; ++i) v.push_back(static_cast<float>(i) + 0.25F);
  } else if (name == "layer.b") {
    for (int i = 0; i < 4; ++i) v.push_back(-static_cast<float>(i));
  } else if (name == "scale") {
    v.push_back(7.5F);
  } else {
    for (int i = 0; i < 12; ++i) v.push_back(100.0F + static_cast<float>(i));
  }
  return v;
}

TEST(ShardedV1, IndexReadsAsVersionOneWithFlatSlices) {
  const ShardedIndex index = read_index(kIndex);
  EXPECT_EQ(index.version, 1);
  EXPECT_EQ(index.world_size, 2);
  EXPECT_EQ(index.metadata.at("format"), "sharded");
  ASSERT_EQ(index.tensors.size(), 4U);
  for (const auto& [name, tensor] : index.tensors) {
    for (const ShardSlice& slice : tensor.slices) {
      EXPECT_FALSE(slice.box.has_value()) << name << " " << slice.key;
    }
  }
  EXPECT_EQ(index.tensors.at("optim.layer.w.exp_avg").slices.size(), 3U);
  train::verify_sharded_files(kIndex, index);
  const auto latest = train::find_latest_checkpoint(kFixture);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->format, train::CheckpointFormat::sharded);
  EXPECT_EQ(latest->step, 3);
}

TEST(ShardedV1, TensorsAssembleByRangeAndByBox) {
  ShardedCheckpoint ckpt = ShardedCheckpoint::open(kIndex);
  for (const std::string name : {"layer.w", "layer.b", "scale", "optim.layer.w.exp_avg"}) {
    const std::vector<float> want = expected(name);
    std::vector<float> got(want.size());
    ckpt.read<float>(name, 0, got);
    EXPECT_EQ(got, want) << name;
  }
  // Column 1 of layer.w, across both ranks' flat slices; the middle rows of
  // the optimizer state, across three slices.
  std::vector<float> column(3);
  ckpt.read_box<float>("layer.w", TensorBox{{0, 1}, {3, 1}}, column);
  EXPECT_EQ(column, (std::vector<float>{1.25F, 5.25F, 9.25F}));
  std::vector<float> rows(8);
  ckpt.read_box<float>("optim.layer.w.exp_avg", TensorBox{{1, 0}, {2, 4}}, rows);
  EXPECT_EQ(rows, (std::vector<float>{104, 105, 106, 107, 108, 109, 110, 111}));

  // Through the training state source, as a strategy's load() reads it.
  const auto source = train::sharded_source(kIndex);
  std::vector<float> cols(6);
  source->read(train::SliceRef{"layer.w", {3, 4}, 0, 6, TensorBox{{0, 2}, {3, 2}}}, cols);
  EXPECT_EQ(cols, (std::vector<float>{2.25F, 3.25F, 6.25F, 7.25F, 10.25F, 11.25F}));
  float scale = 0;
  source->read(train::SliceRef{"scale", {}, 0, 1}, std::span<float>(&scale, 1));
  EXPECT_EQ(scale, 7.5F);
}

TEST(ShardedV1, ConvertsToOneFullFile) {
  const test::TempDir out;
  const train::ConversionSummary summary =
      train::convert_to_full(kFixture, out / "full.safetensors");
  EXPECT_EQ(summary.index, kIndex);
  EXPECT_EQ(summary.world_size, 2);
  const SafetensorsReader full = SafetensorsReader::open(out / "full.safetensors");
  EXPECT_EQ(full.names(),
            (std::vector<std::string>{"layer.w", "layer.b", "scale", "optim.layer.w.exp_avg"}));
  for (const std::string& name : full.names()) {
    const std::vector<float> want = expected(name);
    std::vector<float> got(want.size());
    full.read<float>(name, got);
    EXPECT_EQ(got, want) << name;
  }
  EXPECT_EQ(full.info("layer.w").shape, (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(full.metadata().at("format"), "full");
}

}  // namespace
}  // namespace tessera

// Sharded checkpoints: index round trip, validation, and assembling element
// ranges written by one world size as another world size's shards.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "temp_dir.hpp"
#include "tessera/core/safetensors_index.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

using test::TempDir;
using test::write_bytes;

// Writes `full` (the flattened tensors) as `world` rank files, each holding
// its even_shard of every tensor as a 1-D tensor under the same name, and
// returns the matching index (not yet written).
ShardedIndex write_shards(const std::filesystem::path& dir, int world,
                          const std::map<std::string, std::vector<float>>& full,
                          const std::map<std::string, std::vector<uint64_t>>& shapes) {
  ShardedIndex index;
  index.world_size = world;
  index.metadata = {{"step", "12"}, {"strategy", "zero3"}};
  for (int rank = 0; rank < world; ++rank) {
    SafetensorsWriter writer;
    for (const auto& [name, values] : full) {
      const ElementRange r = even_shard(values.size(), world, rank);
      writer.add<float>(name, {r.count}, std::span<const float>(values.data() + r.offset, r.count));
      ShardedTensor& t = index.tensors[name];
      t.dtype = TESSERA_F32;
      t.shape = shapes.at(name);
      t.slices.push_back({shard_file_name(rank), name, r.offset, r.count});
    }
    writer.save(dir / shard_file_name(rank));
  }
  return index;
}

std::vector<float> iota(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(ShardedIndex, EvenShardSplitsUnevenCounts) {
  const std::vector<std::pair<uint64_t, uint64_t>> three = {{0, 4}, {4, 3}, {7, 3}};
  for (int r = 0; r < 3; ++r) {
    const ElementRange got = even_shard(10, 3, r);
    EXPECT_EQ(got.offset, three[r].first);
    EXPECT_EQ(got.count, three[r].second);
  }
  const ElementRange last = even_shard(10, 4, 3);
  EXPECT_EQ(last.offset, 8U);
  EXPECT_EQ(last.count, 2U);
  EXPECT_EQ(even_shard(1, 3, 2).count, 0U);
  EXPECT_EQ(even_shard(1, 3, 2).offset, 1U);
  EXPECT_THROW(even_shard(10, 3, 3), Error);
  EXPECT_THROW(even_shard(10, 0, 0), Error);
  EXPECT_EQ(shard_file_name(7), "rank00007.safetensors");
}

TEST(ShardedIndex, ThreeRanksReadBackAsFourRanksRanges) {
  TempDir dir;
  const std::map<std::string, std::vector<float>> full = {
      {"embed.weight", iota(10, 1.0F)}, {"head.bias", iota(1, -5.0F)}, {"head.empty", {}}};
  const std::map<std::string, std::vector<uint64_t>> shapes = {
      {"embed.weight", {2, 5}}, {"head.bias", {}}, {"head.empty", {0}}};
  const ShardedIndex index = write_shards(dir.path(), 3, full, shapes);
  write_index(dir / "index.json", index);
  EXPECT_EQ(dir.entries(),
            (std::vector<std::string>{"index.json", "rank00000.safetensors",
                                      "rank00001.safetensors", "rank00002.safetensors"}));

  const ShardedIndex back = read_index(dir / "index.json");
  EXPECT_EQ(back.world_size, 3);
  EXPECT_EQ(back.metadata, index.metadata);
  ASSERT_EQ(back.tensors.size(), 3U);
  const ShardedTensor& embed = back.tensors.at("embed.weight");
  EXPECT_EQ(embed.shape, (std::vector<uint64_t>{2, 5}));
  ASSERT_EQ(embed.slices.size(), 3U);
  EXPECT_EQ(embed.slices[1].file, "rank00001.safetensors");
  EXPECT_EQ(embed.slices[1].offset, 4U);
  EXPECT_EQ(embed.slices[1].count, 3U);

  ShardedCheckpoint ckpt = ShardedCheckpoint::open(dir / "index.json");
  const std::vector<float>& embed_full = full.at("embed.weight");
  for (int rank = 0; rank < 4; ++rank) {
    const ElementRange r = even_shard(10, 4, rank);
    std::vector<float> got(r.count);
    ckpt.read<float>("embed.weight", r.offset, got);
    EXPECT_EQ(got, std::vector<float>(embed_full.begin() + static_cast<long>(r.offset),
                                      embed_full.begin() + static_cast<long>(r.offset + r.count)))
        << "rank " << rank << " of 4";
  }
  std::vector<float> middle(6);
  ckpt.read<float>("embed.weight", 3, middle);  // crosses all three rank files
  EXPECT_EQ(middle, iota(6, 4.0F));
  const std::vector<std::byte> whole = ckpt.read_full("embed.weight");
  ASSERT_EQ(whole.size(), 40U);
  EXPECT_EQ(std::memcmp(whole.data(), embed_full.data(), 40), 0);
  float bias = 0;
  ckpt.read<float>("head.bias", 0, std::span<float>(&bias, 1));
  EXPECT_EQ(bias, -5.0F);
  EXPECT_TRUE(ckpt.read_full("head.empty").empty());
  EXPECT_EQ(ckpt.tensor("head.bias").slices.size(), 3U);  // two of them empty
}

TEST(ShardedIndex, ValidationRefusesBadSlices) {
  ShardedIndex index;
  index.world_size = 2;
  ShardedTensor t;
  t.shape = {10};
  const auto refused = [&](std::vector<ShardSlice> slices, const std::string& part) {
    index.tensors["w"] = t;
    index.tensors["w"].slices = std::move(slices);
    try {
      validate_index(index, "idx");
      ADD_FAILURE() << "accepted; expected '" << part << "'";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("sharded index 'idx': tensor 'w'"), std::string::npos) << message;
      EXPECT_NE(message.find(part), std::string::npos) << message;
    }
  };
  refused({{"a", "w", 0, 6}, {"b", "w", 5, 5}}, "overlaps elements already covered up to 6");
  refused({{"a", "w", 0, 4}, {"b", "w", 5, 5}}, "elements [4, 5) are in no slice");
  refused({{"a", "w", 0, 4}}, "elements [4, 10) are in no slice");
  refused({{"a", "w", 0, 4}, {"b", "w", 4, 7}}, "runs past the 10 elements");
  refused({{"/abs/rank0", "w", 0, 10}}, "not a relative path");
  refused({{"../rank0", "w", 0, 10}}, "not a relative path");
  refused({{"a", "", 0, 10}}, "empty key");
  index.tensors["w"].slices = {{"b", "w", 5, 5}, {"a", "w", 0, 5}, {"c", "w", 3, 0}};
  EXPECT_NO_THROW(validate_index(index, "idx"));  // any order; empty slices anywhere
  index.world_size = 0;
  EXPECT_THROW(validate_index(index, "idx"), Error);
}

TEST(ShardedIndex, WriteIndexRefusesInvalidIndexAndWritesNothing) {
  TempDir dir;
  ShardedIndex index;
  index.tensors["w"] = {TESSERA_F32, {4}, {{"rank00000.safetensors", "w", 0, 3}}};
  EXPECT_THROW(write_index(dir / "index.json", index), Error);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(ShardedIndex, ReadIndexRefusesBadFiles) {
  TempDir dir;
  const auto refused = [&](const std::string& text, const std::string& part) {
    write_bytes(dir / "index.json", text);
    try {
      (void)read_index(dir / "index.json");
      ADD_FAILURE() << "accepted; expected '" << part << "'";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find((dir / "index.json").string()), std::string::npos) << message;
      EXPECT_NE(message.find(part), std::string::npos) << message;
    }
  };
  refused("{\"world_size\": 1,", "not valid JSON");
  refused(R"({"tensors": {}})", "missing field \"world_size\"");
  refused(R"({"world_size": 0, "tensors": {}})", "world_size 0 is out of range");
  refused(R"({"world_size": 1, "tensors": {"w": {"dtype": "Q4", "shape": [1], "slices": []}}})",
          "unknown dtype \"Q4\"");
  refused(R"({"world_size": 1, "tensors": {"w": {"dtype": "F32", "shape": [1], "slices": [)"
          R"({"file": "rank00000.safetensors", "key": "w", "offset": 0, "count": -1}]}}})",
          "\"count\" must be a non-negative integer");
  refused(R"({"world_size": 1, "tensors": {"w": {"dtype": "F32", "shape": [1], "slices": [)"
          R"({"file": "rank00000.safetensors", "key": "w", "offset": 0, "count": 1}]}}})",
          "rank00000.safetensors\" does not exist");
  refused(R"({"world_size": 1, "metadata": {"a": 1}, "tensors": {}})",
          "\"metadata\" must be a string");
  EXPECT_THROW((void)read_index(dir / "missing.json"), Error);
}

TEST(ShardedIndex, RankFileProblemsNameFileAndKey) {
  TempDir dir;
  const std::map<std::string, std::vector<float>> full = {{"w", iota(6, 0.0F)}};
  const ShardedIndex index = write_shards(dir.path(), 2, full, {{"w", {6}}});
  ShardedIndex wrong_key = index;
  wrong_key.tensors["w"].slices[1].key = "w.renamed";
  write_index(dir / "index.json", wrong_key);
  ShardedCheckpoint ckpt = ShardedCheckpoint::open(dir / "index.json");
  std::vector<float> head(3);
  ckpt.read<float>("w", 0, head);  // rank 0 is fine
  EXPECT_EQ(head, iota(3, 0.0F));
  std::vector<float> all(6);
  try {
    ckpt.read<float>("w", 0, all);
    ADD_FAILURE() << "missing key accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank00001.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'w.renamed'"), std::string::npos) << e.what();
  }
  std::vector<float> too_long(5);
  EXPECT_THROW(ckpt.read<float>("w", 2, too_long), Error);  // past the end
  std::vector<double> wrong_type(6);
  EXPECT_THROW(ckpt.read<double>("w", 0, wrong_type), Error);
  EXPECT_THROW((void)ckpt.tensor("nope"), Error);

  ShardedIndex wrong_count = index;
  wrong_count.tensors["w"].shape = {7};
  wrong_count.tensors["w"].slices[1].count = 4;  // file holds 3
  write_index(dir / "index.json", wrong_count);
  ShardedCheckpoint mismatched = ShardedCheckpoint::open(dir / "index.json");
  std::vector<float> seven(7);
  try {
    mismatched.read<float>("w", 0, seven);
    ADD_FAILURE() << "element count mismatch accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_MISMATCH);
    EXPECT_NE(std::string(e.what()).find("rank00001.safetensors"), std::string::npos) << e.what();
  }

  write_index(dir / "index.json", index);
  write_bytes(dir / "rank00001.safetensors", "garbage");
  ShardedCheckpoint corrupt = ShardedCheckpoint::open(dir / "index.json");
  try {
    corrupt.read<float>("w", 0, all);
    ADD_FAILURE() << "corrupt rank file accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank00001.safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera

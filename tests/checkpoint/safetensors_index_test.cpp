// Sharded checkpoints: index round trip, validation, and assembling element
// ranges written by one world size as another world size's shards; box
// slices (column shards, 3-d, empty) and their mix with flat slices, read
// back by range and by box.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "file_bytes.hpp"
#include "tessera/core/safetensors_index.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

using test::read_bytes;
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
  refused({{"a", "w", 0, 6}, {"b", "w", 5, 5}},
          "slice [0, 6) in \"a\" and slice [5, 10) in \"b\" overlap in elements [5, 6)");
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

// Values of a box of the tensor whose element i is `i`, in row-major order
// of the box.
std::vector<float> box_of_iota(const std::vector<uint64_t>& shape, const TensorBox& box) {
  std::vector<float> out(box.numel());
  const SliceLayout all = SliceLayout::whole(shape);
  std::vector<float> full(all.numel());
  std::iota(full.begin(), full.end(), 0.0F);
  copy_overlap(all, reinterpret_cast<const std::byte*>(full.data()),
               SliceLayout::of_box(shape, box), reinterpret_cast<std::byte*>(out.data()),
               sizeof(float));
  return out;
}

// Writes slice `slice` of tensor `name` (element i holds i) under its key in
// `writer`, and lists it in `index`.
void add_slice(SafetensorsWriter& writer, ShardedIndex& index, const std::string& name,
               const std::vector<uint64_t>& shape, ShardSlice slice) {
  std::vector<float> values;
  std::vector<uint64_t> stored;
  if (slice.box) {
    values = box_of_iota(shape, *slice.box);
    slice.count = slice.box->numel();
    stored = slice.box->extent;
  } else {
    values = iota(slice.count, static_cast<float>(slice.offset));
    stored = {slice.count};
  }
  writer.add_owned(slice.key, TESSERA_F32, stored,
                   std::vector<std::byte>(reinterpret_cast<const std::byte*>(values.data()),
                                          reinterpret_cast<const std::byte*>(values.data()) +
                                              values.size() * sizeof(float)));
  ShardedTensor& t = index.tensors[name];
  t.dtype = TESSERA_F32;
  t.shape = shape;
  t.slices.push_back(std::move(slice));
}

ShardSlice box_slice(const std::string& file, const std::string& key, std::vector<uint64_t> offset,
                     std::vector<uint64_t> extent) {
  TensorBox box{std::move(offset), std::move(extent)};
  const uint64_t count = box.numel();
  return ShardSlice{file, key, 0, count, std::move(box)};
}

TEST(ShardedIndex, ColumnShardsReadBackByRangeAndByBox) {
  TempDir dir;
  ShardedIndex index;
  index.world_size = 2;
  const std::vector<uint64_t> w = {4, 6};
  const std::vector<uint64_t> cube = {2, 3, 4};
  for (int rank = 0; rank < 2; ++rank) {
    const std::string file = shard_file_name(rank);
    const uint64_t r = static_cast<uint64_t>(rank);
    SafetensorsWriter writer;
    // Columns [0, 3) and [3, 6) of a [4, 6] weight.
    add_slice(writer, index, "w", w, box_slice(file, "w", {0, 3 * r}, {4, 3}));
    // A [2, 3, 4] tensor split along its last dimension, plus an empty box.
    add_slice(writer, index, "cube", cube, box_slice(file, "cube", {0, 0, 2 * r}, {2, 3, 2}));
    add_slice(writer, index, "cube", cube,
              box_slice(file, "cube@empty", {1, 3 * r, 0}, {1, 3 - 3 * r, 0}));
    writer.save(dir / file);
  }
  write_index(dir / "index.json", index);
  const std::string text = read_bytes(dir / "index.json");
  EXPECT_NE(text.find("\"version\": 2"), std::string::npos) << text;
  EXPECT_NE(text.find("\"box_offset\""), std::string::npos) << text;
  EXPECT_EQ(text.find("\"count\""), std::string::npos) << "box slices list no count: " << text;

  const ShardedIndex back = read_index(dir / "index.json");
  EXPECT_EQ(back.version, 2);
  ASSERT_EQ(back.tensors.at("w").slices.size(), 2U);
  const ShardSlice& second = back.tensors.at("w").slices[1];
  ASSERT_TRUE(second.box.has_value());
  EXPECT_EQ(*second.box, (TensorBox{{0, 3}, {4, 3}}));
  EXPECT_EQ(second.count, 12U);
  EXPECT_EQ(second.offset, 0U);

  ShardedCheckpoint ckpt = ShardedCheckpoint::open(dir / "index.json");
  // Flat ranges cut across both column shards: three ranks' even shards.
  for (int rank = 0; rank < 3; ++rank) {
    const ElementRange r = even_shard(24, 3, rank);
    std::vector<float> got(r.count);
    ckpt.read<float>("w", r.offset, got);
    EXPECT_EQ(got, iota(r.count, static_cast<float>(r.offset))) << "rank " << rank << " of 3";
  }
  // Boxes: a row shard, another column split, a 3-d box, an empty box.
  for (const TensorBox& box : {TensorBox{{1, 0}, {2, 6}}, TensorBox{{0, 2}, {4, 2}},
                               TensorBox{{3, 5}, {1, 1}}, TensorBox{{0, 0}, {4, 0}}}) {
    std::vector<float> got(box.numel());
    ckpt.read_box<float>("w", box, got);
    EXPECT_EQ(got, box_of_iota(w, box)) << box_text(box);
  }
  const TensorBox middle{{1, 1, 1}, {1, 2, 2}};
  std::vector<float> got(4);
  ckpt.read_box<float>("cube", middle, got);
  EXPECT_EQ(got, (std::vector<float>{17, 18, 21, 22}));
  std::vector<float> cube_all(24);
  ckpt.read<float>("cube", 0, cube_all);
  EXPECT_EQ(cube_all, iota(24, 0.0F));

  // Boxes that are not boxes of the tensor, and buffers of another size.
  std::vector<float> four(4);
  EXPECT_THROW(ckpt.read_box<float>("w", TensorBox{{0, 5}, {2, 2}}, four), Error);
  EXPECT_THROW(ckpt.read_box<float>("w", TensorBox{{0}, {4}}, four), Error);
  EXPECT_THROW(ckpt.read_box<float>("w", TensorBox{{0, 0}, {1, 3}}, four), Error);
  try {
    ckpt.read_box<float>("w", TensorBox{{0, 5}, {2, 2}}, four);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'w' of shape [4, 6]: box [0:2, 5:7] runs past "
                                         "dimension 1 of size 6"),
              std::string::npos)
        << e.what();
  }
}

TEST(ShardedIndex, FlatAndBoxSlicesMix) {
  // A [4, 5] tensor as flat [0, 7), the box of rows 1..3 and columns 2..4,
  // and the box of rows 2..3 and columns 0..1, in three files.
  TempDir dir;
  ShardedIndex index;
  index.world_size = 3;
  const std::vector<uint64_t> shape = {4, 5};
  {
    SafetensorsWriter writer;
    add_slice(writer, index, "t", shape, ShardSlice{"rank00000.safetensors", "t", 0, 7});
    writer.save(dir / "rank00000.safetensors");
  }
  {
    SafetensorsWriter writer;
    add_slice(writer, index, "t", shape, box_slice("rank00001.safetensors", "t", {1, 2}, {3, 3}));
    writer.save(dir / "rank00001.safetensors");
  }
  {
    SafetensorsWriter writer;
    add_slice(writer, index, "t", shape, box_slice("rank00002.safetensors", "t", {2, 0}, {2, 2}));
    writer.save(dir / "rank00002.safetensors");
  }
  write_index(dir / "index.json", index);
  ShardedCheckpoint ckpt = ShardedCheckpoint::open(dir / "index.json");
  const std::vector<std::byte> whole = ckpt.read_full("t");
  std::vector<float> values(20);
  std::memcpy(values.data(), whole.data(), whole.size());
  EXPECT_EQ(values, iota(20, 0.0F));
  for (int world : {2, 3, 7}) {
    for (int rank = 0; rank < world; ++rank) {
      const ElementRange r = even_shard(20, world, rank);
      std::vector<float> got(r.count);
      ckpt.read<float>("t", r.offset, got);
      EXPECT_EQ(got, iota(r.count, static_cast<float>(r.offset))) << rank << " of " << world;
    }
  }
  for (uint64_t c = 0; c < 5; ++c) {  // one column at a time
    const TensorBox column{{0, c}, {4, 1}};
    std::vector<float> got(4);
    ckpt.read_box<float>("t", column, got);
    EXPECT_EQ(got, box_of_iota(shape, column)) << "column " << c;
  }
}

TEST(ShardedIndex, ValidationRefusesBadBoxes) {
  ShardedIndex index;
  index.world_size = 2;
  ShardedTensor t;
  t.shape = {3, 4};
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
  const ShardSlice left = box_slice("a", "w", {0, 0}, {3, 2});
  const ShardSlice right = box_slice("b", "w", {0, 2}, {3, 2});
  refused({left, box_slice("b", "w", {1, 1}, {2, 3})},
          "slice [0:3, 0:2] in \"a\" and slice [1:3, 1:4] in \"b\" overlap in elements "
          "[1:3, 1:2]");
  refused({left, right, ShardSlice{"c", "w", 5, 2}},
          "slice [0:3, 0:2] in \"a\" and slice [5, 7) in \"c\" overlap in 1 element at index "
          "[1, 1]");
  refused({left}, "elements [2, 4) are in no slice (the first at index [0, 2])");
  refused({left, box_slice("b", "w", {0, 2}, {2, 2})},
          "elements [10, 12) are in no slice (the first at index [2, 2])");
  refused({left, box_slice("b", "w", {0, 2}, {3, 3})},
          "slice [0:3, 2:5] in \"b\": box [0:3, 2:5] runs past dimension 1 of size 4");
  refused({left, box_slice("b", "w", {0}, {12})}, "has 1 dimensions, the tensor 2");
  ShardSlice miscounted = right;
  miscounted.count = 5;
  refused({left, miscounted}, "has offset 0 and count 5, a box slice offset 0 and count 6");
  index.tensors["w"].slices = {right, ShardSlice{"c", "w", 0, 2}, ShardSlice{"c", "w", 4, 2},
                               ShardSlice{"c", "w", 8, 2},
                               box_slice("d", "w", {0, 3}, {0, 1})};  // empty boxes anywhere
  EXPECT_NO_THROW(validate_index(index, "idx"));
  index.tensors["w"] = ShardedTensor{TESSERA_F32, {}, {box_slice("a", "s", {}, {})}};
  EXPECT_NO_THROW(validate_index(index, "idx"));  // a 0-d tensor as a box
}

TEST(ShardedIndex, ReadIndexChecksVersionsAndBoxFields) {
  TempDir dir;
  {
    SafetensorsWriter writer;
    const std::vector<float> two = {1, 2};
    writer.add<float>("w", {2}, two);
    writer.save(dir / "rank00000.safetensors");
  }
  const auto refused = [&](const std::string& text, const std::string& part) {
    write_bytes(dir / "index.json", text);
    try {
      (void)read_index(dir / "index.json");
      ADD_FAILURE() << "accepted; expected '" << part << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  const std::string tensors =
      R"("tensors": {"w": {"dtype": "F32", "shape": [2], "slices": [{"file": )"
      R"("rank00000.safetensors", "key": "w", "box_offset": [0], "box_extent": [2]}]}}})";
  refused(R"({"world_size": 1, )" + tensors,
          "slice \"w\" is a box, which index version 1 cannot hold");
  refused(R"({"version": 3, "world_size": 1, )" + tensors,
          "index version 3 is newer than this build reads (up to 2)");
  refused(R"({"version": "2", "world_size": 1, )" + tensors, "\"version\" must be a positive");
  refused(R"({"version": 2, "world_size": 1, "tensors": {"w": {"dtype": "F32", "shape": [2], )"
          R"("slices": [{"file": "rank00000.safetensors", "key": "w", "offset": 0, )"
          R"("box_offset": [0], "box_extent": [2]}]}}})",
          "has both a flat range");
  refused(R"({"version": 2, "world_size": 1, "tensors": {"w": {"dtype": "F32", "shape": [2], )"
          R"("slices": [{"file": "rank00000.safetensors", "key": "w", "box_offset": [0]}]}}})",
          "missing field \"box_extent\"");
  refused(R"({"version": 2, "world_size": 1, "tensors": {"w": {"dtype": "F32", "shape": [2], )"
          R"("slices": [{"file": "rank00000.safetensors", "key": "w", "box_offset": [0], )"
          R"("box_extent": [-2]}]}}})",
          "\"box_extent\" must be a non-negative integer");
  write_bytes(dir / "index.json", R"({"version": 2, "world_size": 1, )" + tensors);
  const ShardedIndex index = read_index(dir / "index.json");
  EXPECT_EQ(index.version, 2);
  EXPECT_EQ(index.tensors.at("w").slices.at(0).count, 2U);
}

}  // namespace
}  // namespace tessera

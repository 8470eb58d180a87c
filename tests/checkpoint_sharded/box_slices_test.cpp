// Box slices in training checkpoints: the rank files and the index store
// box pieces (column shards) as boxes, flat pieces that are boxes as boxes
// and the rest as flat ranges; such a checkpoint converts to one full file,
// and a run resumed from a copy re-sliced into column shards on another
// world size equals the run resumed from the original, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "sharded_support.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/safetensors_index.hpp"
#include "tessera/core/train/checkpointing.hpp"
#include "tessera/core/train/sharded_checkpoint.hpp"

namespace tessera::test {
namespace {

namespace fs = std::filesystem;
using train::CollectedState;

std::vector<float> iota_values(uint64_t n, float start) {
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// The values of `box` of a tensor of `shape` whose element i is start + i.
std::vector<float> box_values(const std::vector<uint64_t>& shape, const TensorBox& box,
                              float start) {
  const SliceLayout all = SliceLayout::whole(shape);
  const std::vector<float> full = iota_values(all.numel(), start);
  std::vector<float> out(box.numel());
  copy_overlap(all, reinterpret_cast<const std::byte*>(full.data()),
               SliceLayout::of_box(shape, box), reinterpret_cast<std::byte*>(out.data()),
               sizeof(float));
  return out;
}

CollectedState::Piece flat_piece(uint64_t offset, uint64_t count, float start) {
  return CollectedState::Piece{offset, iota_values(count, start + static_cast<float>(offset)), -1};
}

CollectedState::Piece box_piece(const std::vector<uint64_t>& shape, TensorBox box, float start) {
  std::vector<float> values = box_values(shape, box, start);
  return CollectedState::Piece{0, std::move(values), -1, std::move(box)};
}

TEST(ShardedBoxes, WriterStoresBoxesAndConversionAssemblesThem) {
  Scratch dir;
  const std::vector<uint64_t> w = {4, 6};
  const std::vector<int64_t> w_shape = {4, 6};
  CollectedState rank0;
  CollectedState rank1;
  // A weight in column shards, a bias in flat ranges (1-d: boxes), the
  // optimizer state in flat ranges of which one is whole rows, a scalar.
  rank0.add("layer.w", w_shape, box_piece(w, TensorBox{{0, 0}, {4, 3}}, 0));
  rank1.add("layer.w", w_shape, box_piece(w, TensorBox{{0, 3}, {4, 3}}, 0));
  rank0.add("layer.b", std::vector<int64_t>{6}, flat_piece(0, 4, -10));
  rank1.add("layer.b", std::vector<int64_t>{6}, flat_piece(4, 2, -10));
  rank0.add("optim.layer.w.exp_avg", w_shape, flat_piece(0, 9, 100));
  rank0.add("optim.layer.w.exp_avg", w_shape, flat_piece(18, 6, 100));
  rank1.add("optim.layer.w.exp_avg", w_shape, flat_piece(9, 9, 100));
  rank1.add("scale", std::vector<int64_t>{}, flat_piece(0, 1, 2.5F));

  const fs::path step_dir = train::prepare_sharded_step_dir(dir.path(), 5);
  std::vector<train::SliceRecord> records =
      train::write_rank_shard(step_dir, 0, rank0, {{"world_size", "2"}});
  const std::vector<train::SliceRecord> theirs =
      train::write_rank_shard(step_dir, 1, rank1, {{"world_size", "2"}});
  // The records rank 1 sends rank 0 keep their boxes.
  const std::vector<train::SliceRecord> sent =
      train::parse_slice_records(train::format_slice_records(theirs), "rank 1");
  ASSERT_EQ(sent.size(), theirs.size());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(sent[i].slice.box, theirs[i].slice.box);
  records.insert(records.end(), sent.begin(), sent.end());
  const fs::path index_path = train::write_sharded_index(
      dir.path(), 5, 2, records, {"layer.w", "layer.b", "scale", "optim.layer.w.exp_avg"},
      {{"world_size", "2"}});

  const ShardedIndex index = read_index(index_path);
  EXPECT_EQ(index.version, kShardedIndexVersion);
  const auto kinds = [&](const std::string& name) {
    std::string text;
    for (const ShardSlice& s : index.tensors.at(name).slices) {
      text += (s.box ? box_text(*s.box) : range_text(s.offset, s.count)) + " ";
    }
    return text;
  };
  EXPECT_EQ(kinds("layer.w"), "[0:4, 0:3] [0:4, 3:6] ");
  EXPECT_EQ(kinds("layer.b"), "[0:4] [4:6] ");
  EXPECT_EQ(kinds("optim.layer.w.exp_avg"), "[0, 9) [3:4, 0:6] [9, 18) ");
  EXPECT_EQ(kinds("scale"), "[] ");
  // Box pieces are stored with the box's shape, flat ones as 1-D tensors;
  // keys of a rank's several pieces carry their first element.
  const SafetensorsReader file0 = SafetensorsReader::open(step_dir / shard_file_name(0));
  EXPECT_EQ(file0.info("layer.w").shape, (std::vector<uint64_t>{4, 3}));
  EXPECT_EQ(file0.info("optim.layer.w.exp_avg@0").shape, (std::vector<uint64_t>{9}));
  EXPECT_EQ(file0.info("optim.layer.w.exp_avg@18").shape, (std::vector<uint64_t>{1, 6}));
  train::verify_sharded_files(index_path, index);

  // Conversion: every tensor whole, equal to the merged state.
  CollectedState all = rank0;
  CollectedState copy = rank1;
  all.merge(std::move(copy));
  const fs::path out = dir / "full.safetensors";
  const train::ConversionSummary summary = train::convert_to_full(dir.path(), out);
  EXPECT_EQ(summary.tensors, 4U);
  const SafetensorsReader full = SafetensorsReader::open(out);
  EXPECT_EQ(full.names(),
            (std::vector<std::string>{"layer.w", "layer.b", "scale", "optim.layer.w.exp_avg"}));
  for (const std::string& name : full.names()) {
    const std::vector<float> want = all.full(name);
    std::vector<float> got(want.size());
    full.read<float>(name, got);
    EXPECT_EQ(got, want) << name;
  }
  EXPECT_EQ(full.info("layer.w").shape, w);

  // A flat strategy reads its shards across the column shards.
  const auto source = train::sharded_source(index_path);
  for (int rank = 0; rank < 5; ++rank) {
    const ElementRange r = even_shard(24, 5, rank);
    std::vector<float> got(r.count);
    source->read(train::SliceRef{"layer.w", w_shape, r.offset, r.count}, got);
    EXPECT_EQ(got, iota_values(r.count, static_cast<float>(r.offset))) << rank;
  }
}

// Rewrites the sharded checkpoint `index_path` into `dir` at the same step
// as if `world` ranks had written it by column shards: every tensor of two
// or more dimensions split into even column ranges (boxes), the others into
// even flat ranges; metadata kept (but world_size).
void write_as_column_shards(const fs::path& index_path, const fs::path& dir, int world) {
  ShardedCheckpoint source = ShardedCheckpoint::open(index_path);
  const ShardedIndex& index = source.index();
  const int64_t step = std::stoll(index.metadata.at("step"));
  std::vector<CollectedState> ranks(static_cast<size_t>(world));
  for (const auto& [name, tensor] : index.tensors) {
    const std::vector<int64_t> shape(tensor.shape.begin(), tensor.shape.end());
    for (int r = 0; r < world; ++r) {
      CollectedState::Piece piece;
      if (tensor.shape.size() >= 2) {
        const ElementRange cols = even_shard(tensor.shape[1], world, r);
        TensorBox box = whole_box(tensor.shape);
        box.offset[1] = cols.offset;
        box.extent[1] = cols.count;
        piece.values.resize(box.numel());
        source.read_box<float>(name, box, piece.values);
        piece.box = std::move(box);
      } else {
        const ElementRange part = even_shard(shape_numel(tensor.shape), world, r);
        piece.offset = part.offset;
        piece.values.resize(part.count);
        source.read<float>(name, part.offset, piece.values);
      }
      ranks[static_cast<size_t>(r)].add(name, shape, std::move(piece), false);
    }
  }
  std::map<std::string, std::string> metadata = index.metadata;
  for (const char* key : {"step", "format", "tensor_order"}) metadata.erase(key);
  metadata["world_size"] = std::to_string(world);
  const fs::path step_dir = train::prepare_sharded_step_dir(dir, step);
  std::vector<train::SliceRecord> records;
  for (int r = 0; r < world; ++r) {
    const auto mine = train::write_rank_shard(step_dir, r, ranks[static_cast<size_t>(r)], metadata);
    records.insert(records.end(), mine.begin(), mine.end());
  }
  (void)train::write_sharded_index(dir, step, world, records, train::sharded_tensor_order(index),
                                   metadata);
}

TEST(ShardedBoxes, ResumeFromColumnShardsEqualsResumeFromTheOriginal) {
  Scratch original;
  Scratch columns;
  const RunSpec saved =
      checkpoint_spec("gpt", "zero3", 2, 4, checkpoint_toml(original.path(), 0, "sharded", false));
  ASSERT_EQ(run(saved).last_step, 4);
  const auto latest = train::find_latest_checkpoint(original.path());
  ASSERT_TRUE(latest.has_value());
  write_as_column_shards(latest->file, columns.path(), 3);

  const ShardedIndex resliced = read_index(columns / "step-00000004" / "index.json");
  size_t boxes = 0;
  for (const auto& [name, tensor] : resliced.tensors) {
    for (const ShardSlice& slice : tensor.slices) boxes += slice.box ? 1 : 0;
  }
  EXPECT_GT(boxes, resliced.tensors.size()) << "the copy is mostly column shards";

  for (const std::string strategy : {"fsdp", "ddp"}) {
    const train::RunResult from_original = run(checkpoint_spec(
        "gpt", strategy, 2, 6, checkpoint_toml(original.path(), 0, "sharded", true)));
    const train::RunResult from_columns = run(checkpoint_spec(
        "gpt", strategy, 2, 6, checkpoint_toml(columns.path(), 0, "sharded", true)));
    ASSERT_EQ(from_original.first_step, 5) << strategy;
    ASSERT_EQ(from_columns.first_step, 5) << strategy;
    EXPECT_EQ(first_bit_difference(merged(from_columns), merged(from_original)), "") << strategy;
    // The runs wrote step 6 over the step-4 checkpoints: resume both from
    // step 4 again for the next strategy.
    train::write_latest(original.path(), 4);
    train::write_latest(columns.path(), 4);
  }
}

}  // namespace
}  // namespace tessera::test

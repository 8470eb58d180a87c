// State sources: the model's own init equals ModelParams::init; a
// safetensors file round-trips through the source and the C reader table,
// by flat range and by box; missing tensors, other shapes and bad ranges or
// boxes are errors naming them.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "checkpoint/file_bytes.hpp"
#include "support/error_of.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "tessera/sdk/error.hpp"
#include "train/train_util.hpp"

namespace tessera::train {
namespace {

using test::error_of;
using test::last_error;
using test::same_bits;

SliceRef slice(std::string name, std::vector<int64_t> shape, uint64_t offset, uint64_t count) {
  return SliceRef{std::move(name), std::move(shape), offset, count};
}

SliceRef box_slice(std::string name, std::vector<int64_t> shape, std::vector<uint64_t> offset,
                   std::vector<uint64_t> extent) {
  TensorBox box{std::move(offset), std::move(extent)};
  const uint64_t count = box.numel();
  return SliceRef{std::move(name), std::move(shape), 0, count, std::move(box)};
}

// Elements of a row-major [rows, cols] matrix `m` in columns [c0, c1).
std::vector<float> columns(std::span<const float> m, std::size_t cols, std::size_t c0,
                           std::size_t c1) {
  std::vector<float> out;
  for (std::size_t r = 0; r < m.size() / cols; ++r) {
    for (std::size_t c = c0; c < c1; ++c) out.push_back(m[r * cols + c]);
  }
  return out;
}

TEST(InitSource, EqualsModelParamsInit) {
  const auto m = test::tiny_gpt(true);
  const auto source = init_source(*m, 42);
  model::ModelParams expected(*m);
  expected.init(*m, 42);
  EXPECT_NE(source->describe().find("seed 42"), std::string::npos) << source->describe();

  int checked = 0;
  for (std::size_t u = 0; u < m->size(); ++u) {
    const auto specs = m->params(u);
    for (std::size_t p = 0; p < specs.size(); ++p) {
      const std::string name = m->unit_name(u) + "." + specs[p].name;
      if (!specs[p].tied_to.empty()) {
        EXPECT_FALSE(source->has(name)) << name << " is tied: only its owner's name exists";
        continue;
      }
      ASSERT_TRUE(source->has(name)) << name;
      const auto n = static_cast<uint64_t>(specs[p].numel());
      std::vector<float> values(n);
      source->read(slice(name, specs[p].shape, 0, n), values);
      EXPECT_TRUE(same_bits(values, expected.at({u, p}))) << name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
  EXPECT_TRUE(source->has("embed.wte"));
  EXPECT_FALSE(source->has("head.wte"));
  EXPECT_FALSE(source->has("optim.embed.wte.exp_avg"));

  // A slice in the middle of the embedding table.
  std::vector<float> part(13);
  source->read(slice("embed.wte", {11, 8}, 30, 13), part);
  EXPECT_TRUE(same_bits(part, expected.at({0, 0}).subspan(30, 13)));
  // A column shard of it.
  std::vector<float> cols(33);
  source->read(box_slice("embed.wte", {11, 8}, {0, 5}, {11, 3}), cols);
  EXPECT_TRUE(same_bits(cols, columns(expected.at({0, 0}), 8, 5, 8)));
}

TEST(InitSource, ErrorsNameTheTensor) {
  const auto m = test::tiny_gpt(true);
  const auto source = init_source(*m, 1);
  std::vector<float> out(88);
  std::string msg = error_of([&] { source->read(slice("embed.wte", {8, 11}, 0, 88), out); });
  EXPECT_NE(msg.find("'embed.wte' has shape [11, 8]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[8, 11]"), std::string::npos) << msg;
  msg = error_of([&] { source->read(slice("embed.wte", {11, 8}, 80, 9), out); });
  EXPECT_NE(msg.find("[80, 89) are outside tensor 'embed.wte'"), std::string::npos) << msg;
  msg = error_of([&] { source->read(slice("optim.embed.wte.exp_avg", {11, 8}, 0, 88), out); });
  EXPECT_NE(msg.find("no tensor 'optim.embed.wte.exp_avg'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model init (seed 1)"), std::string::npos) << msg;
}

TEST(StateReader, CTableReadsAndReportsErrors) {
  const auto m = test::tiny_mlp();
  const auto source = init_source(*m, 3);
  const tessera_state_reader reader = make_reader(*source);
  EXPECT_EQ(reader.struct_size, sizeof(tessera_state_reader));
  const std::string name = m->unit_name(0) + ".w";
  EXPECT_EQ(reader.has(reader.ctx, name.c_str()), 1);
  EXPECT_EQ(reader.has(reader.ctx, "nope"), 0);
  EXPECT_EQ(reader.has(reader.ctx, nullptr), 0);

  const int64_t shape[] = {6, 7};
  tessera_tensor_slice s{
      sizeof(tessera_tensor_slice), 2, name.c_str(), shape, 4, 10, nullptr, nullptr};
  std::vector<float> out(10);
  ASSERT_EQ(reader.read(reader.ctx, &s, out.data()), TESSERA_OK) << last_error();
  model::ModelParams expected(*m);
  expected.init(*m, 3);
  EXPECT_TRUE(same_bits(out, expected.at({0, 0}).subspan(4, 10)));

  const int64_t wrong[] = {7, 6};
  s.shape = wrong;
  EXPECT_EQ(reader.read(reader.ctx, &s, out.data()), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("state read"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("'" + name + "' has shape [6, 7]"), std::string::npos)
      << last_error();
  s.shape = shape;

  // Rows 1..4, columns 2..5 as a box.
  const int64_t box_offset[] = {1, 2};
  const int64_t box_extent[] = {4, 3};
  s.box_offset = box_offset;
  s.box_extent = box_extent;
  s.offset = 0;
  s.count = 12;
  std::vector<float> box(12);
  ASSERT_EQ(reader.read(reader.ctx, &s, box.data()), TESSERA_OK) << last_error();
  std::vector<float> want;
  for (std::size_t r = 1; r < 5; ++r) {
    for (std::size_t c = 2; c < 5; ++c) want.push_back(expected.at({0, 0})[r * 7 + c]);
  }
  EXPECT_TRUE(same_bits(box, want));
  s.offset = 1;
  EXPECT_EQ(reader.read(reader.ctx, &s, box.data()), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("a box slice has offset 0"), std::string::npos) << last_error();
  s.offset = 0;
  s.box_offset = nullptr;
  s.box_extent = nullptr;

  s.name = nullptr;
  EXPECT_EQ(reader.read(reader.ctx, &s, out.data()), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("no name"), std::string::npos) << last_error();
}

TEST(SafetensorsSource, RoundTripAndErrors) {
  const test::TempDir dir;
  const std::vector<float> w = test::random_values(12, 4);
  const std::vector<float> m = test::random_values(12, 5);
  const std::vector<int32_t> ids = {1, 2, 3};
  SafetensorsWriter writer;
  writer.add<float>("layer0.w", {3, 4}, w);
  writer.add<float>("optim.layer0.w.exp_avg", {3, 4}, m);
  writer.add<int32_t>("ids", {3}, ids);
  const auto file = dir / "model.safetensors";
  writer.save(file);

  const auto source = safetensors_source(file);
  EXPECT_EQ(source->describe(), file.string());
  EXPECT_TRUE(source->has("layer0.w"));
  EXPECT_TRUE(source->has("optim.layer0.w.exp_avg"));
  EXPECT_FALSE(source->has("layer1.w"));
  std::vector<float> all(12);
  source->read(slice("layer0.w", {3, 4}, 0, 12), all);
  EXPECT_TRUE(same_bits(all, w));
  std::vector<float> part(5);
  source->read(slice("optim.layer0.w.exp_avg", {3, 4}, 7, 5), part);
  EXPECT_TRUE(same_bits(part, std::span<const float>(m).subspan(7, 5)));
  std::vector<float> none;
  source->read(slice("layer0.w", {3, 4}, 12, 0), none);  // an empty slice at the end

  std::string msg = error_of([&] { source->read(slice("layer0.w", {4, 3}, 0, 12), all); });
  EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("'layer0.w' has shape [3, 4]"), std::string::npos) << msg;
  msg = error_of([&] { source->read(slice("layer1.w", {3, 4}, 0, 12), all); });
  EXPECT_NE(msg.find(file.string() + ": no tensor 'layer1.w'"), std::string::npos) << msg;
  msg = error_of([&] { source->read(slice("ids", {3}, 0, 3), all); });
  EXPECT_NE(msg.find("'ids' is I32"), std::string::npos) << msg;
  // Boxes: a column shard, a row shard, an empty box; one past the shape.
  std::vector<float> cols(6);
  source->read(box_slice("layer0.w", {3, 4}, {0, 1}, {3, 2}), cols);
  EXPECT_TRUE(same_bits(cols, columns(w, 4, 1, 3)));
  std::vector<float> rows(8);
  source->read(box_slice("optim.layer0.w.exp_avg", {3, 4}, {1, 0}, {2, 4}), rows);
  EXPECT_TRUE(same_bits(rows, std::span<const float>(m).subspan(4, 8)));
  source->read(box_slice("layer0.w", {3, 4}, {3, 0}, {0, 4}), none);
  msg = error_of([&] { source->read(box_slice("layer0.w", {3, 4}, {0, 3}, {3, 2}), cols); });
  EXPECT_NE(msg.find(file.string() + ": tensor 'layer0.w' of shape [3, 4]: box [0:3, 3:5] runs "
                                     "past dimension 1 of size 4"),
            std::string::npos)
      << msg;
  msg = error_of([&] { source->read(box_slice("layer0.w", {3, 4}, {0, 0}, {3, 2}), rows); });
  EXPECT_NE(msg.find("6 elements requested into a buffer of 8"), std::string::npos) << msg;

  msg = error_of([&] { (void)safetensors_source(dir / "missing.safetensors"); });
  EXPECT_NE(msg.find("missing.safetensors"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tessera::train

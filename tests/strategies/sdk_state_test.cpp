// The SDK's state transfer: parameters and optimizer slots read and written
// by flat range through the host's state reader and writer, with optimizer
// state all or nothing; boxes (column and row shards, 3-d, empty) read and
// written through StateReader::read_box and StateWriter::write_box.
#include <gtest/gtest.h>

#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "fake_tables.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/flat_state.hpp"

namespace tessera::test {
namespace {

// flat: a [0,6) b [6,10) c [10,15) d [15,18); mid.t tied to embed.a.
struct StateFixture {
  FakeModel model{{
      FakeUnit{"embed", {FakeParam{"a", {2, 3}}, FakeParam{"b", {4}}}},
      FakeUnit{"mid", {FakeParam{"c", {5}}, FakeParam{"t", {2, 3}, 0, 0}}},
      FakeUnit{"head", {FakeParam{"d", {3}}}},
  }};
  FakeOptimizer fake_opt{{"m", "v"}};
  HostContext host_ctx{"strategy.test"};
  sdk::Host host{host_ctx.api()};
  sdk::ModelView view{host, model.api(), model.handle()};
  sdk::FlatLayout layout{view};
  sdk::OptimizerView optimizer{host, fake_opt.api(), fake_opt.handle()};

  // A store holding every parameter with value = flat index + base, and,
  // if asked, every optimizer slot (slot k: + 100 * (k + 1)).
  FakeStore store(float base, bool with_optim) const {
    FakeStore s;
    for (const sdk::FlatEntry& e : layout.entries()) {
      FakeStore::Tensor t{e.shape, {}};
      for (uint64_t i = 0; i < e.numel; ++i)
        t.values.push_back(base + static_cast<float>(e.offset + i));
      s.tensors[e.full_name] = t;
      if (!with_optim) continue;
      for (int k = 0; k < 2; ++k) {
        FakeStore::Tensor o = t;
        for (float& v : o.values) v += 100.0F * static_cast<float>(k + 1);
        s.tensors[sdk::optim_key(e.full_name, optimizer.slot_name(k))] = o;
      }
    }
    return s;
  }
};

TEST(FlatState, ReadsParametersOfAnyFlatRange) {
  StateFixture f;
  FakeStore store = f.store(0.5F, false);
  const auto reader_table = store.reader();
  const sdk::StateReader reader(f.host, &reader_table);
  std::vector<float> all(f.layout.total());
  sdk::read_params(reader, f.layout, {0, f.layout.total()}, all);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], 0.5F + static_cast<float>(i));
  std::vector<float> part(8);
  sdk::read_params(reader, f.layout, {4, 12}, part);
  for (size_t i = 0; i < part.size(); ++i) EXPECT_EQ(part[i], 4.5F + static_cast<float>(i));
  std::vector<float> short_buffer(3);
  EXPECT_THROW(sdk::read_params(reader, f.layout, {4, 12}, short_buffer), Error);
  EXPECT_THROW(sdk::read_params(reader, f.layout, {10, 30}, all), Error);
}

TEST(FlatState, WritesOneSlicePerTensorPiece) {
  StateFixture f;
  FakeStore out;
  const auto writer_table = out.writer();
  const sdk::StateWriter writer(f.host, &writer_table);
  std::vector<float> values(11, 2.0F);
  sdk::write_params(writer, f.layout, {5, 16}, values);
  EXPECT_EQ(out.writes,
            (std::vector<std::string>{"embed.a@5+1", "embed.b@0+4", "mid.c@0+5", "head.d@0+1"}));
  EXPECT_EQ(out.tensors.at("embed.a").shape, (std::vector<int64_t>{2, 3}));
}

TEST(FlatState, OptimizerStateIsReadOnlyWhenComplete) {
  StateFixture f;
  sdk::OptimState state = f.optimizer.make_state(f.layout.total());
  for (int k = 0; k < 2; ++k) {
    for (float& v : state.slot(k)) v = 7.0F;
  }
  const sdk::FlatRange all{0, f.layout.total()};

  FakeStore fresh = f.store(0.0F, false);
  const auto fresh_table = fresh.reader();
  EXPECT_FALSE(sdk::read_optimizer_state(sdk::StateReader(f.host, &fresh_table), f.layout,
                                         f.optimizer, state, all));
  EXPECT_EQ(state.slot(1)[3], 7.0F);

  FakeStore full = f.store(0.0F, true);
  const auto full_table = full.reader();
  EXPECT_TRUE(sdk::read_optimizer_state(sdk::StateReader(f.host, &full_table), f.layout,
                                        f.optimizer, state, all));
  EXPECT_EQ(state.slot(0)[3], 103.0F);
  EXPECT_EQ(state.slot(1)[17], 217.0F);

  // A shard: elements [6, 12) into a state of 6 elements.
  sdk::OptimState shard = f.optimizer.make_state(6);
  EXPECT_TRUE(sdk::read_optimizer_state(sdk::StateReader(f.host, &full_table), f.layout,
                                        f.optimizer, shard, {6, 12}));
  EXPECT_EQ(shard.slot(0)[0], 106.0F);
  EXPECT_EQ(shard.slot(1)[5], 211.0F);

  FakeStore partial = f.store(0.0F, true);
  partial.tensors.erase("optim.mid.c.v");
  const auto partial_table = partial.reader();
  try {
    (void)sdk::read_optimizer_state(sdk::StateReader(f.host, &partial_table), f.layout, f.optimizer,
                                    state, all);
    FAIL() << "incomplete optimizer state accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("'optim.mid.c.v'"), std::string::npos) << e.what();
  }
}

TEST(FlatState, OptimizerStateRoundTrips) {
  StateFixture f;
  sdk::OptimState state = f.optimizer.make_state(f.layout.total());
  for (int k = 0; k < 2; ++k) {
    auto slot = state.slot(k);
    for (size_t i = 0; i < slot.size(); ++i)
      slot[i] = static_cast<float>(k * 1000) + static_cast<float>(i);
  }
  const sdk::FlatRange all{0, f.layout.total()};
  FakeStore out = f.store(0.0F, false);
  const auto writer_table = out.writer();
  sdk::write_optimizer_state(sdk::StateWriter(f.host, &writer_table), f.layout, f.optimizer, state,
                             all);
  sdk::OptimState back = f.optimizer.make_state(f.layout.total());
  const auto reader_table = out.reader();
  EXPECT_TRUE(sdk::read_optimizer_state(sdk::StateReader(f.host, &reader_table), f.layout,
                                        f.optimizer, back, all));
  for (int k = 0; k < 2; ++k) {
    const auto a = state.slot(k);
    const auto b = back.slot(k);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << "slot " << k;
  }
}

TEST(StateIo, BoxesRoundTripThroughTheTables) {
  HostContext host_ctx{"strategy.test"};
  const sdk::Host host{host_ctx.api()};
  FakeStore store;
  const auto writer_table = store.writer();
  const sdk::StateWriter writer(host, &writer_table);
  using Dims = std::vector<int64_t>;
  using Values = std::vector<float>;
  // Two column shards of a [3, 4] weight: columns [0, 1) and [1, 4).
  const Dims shape{3, 4};
  writer.write_box("w", shape, Dims{0, 0}, Dims{3, 1}, Values{0, 4, 8});
  writer.write_box("w", shape, Dims{0, 1}, Dims{3, 3}, Values{1, 2, 3, 5, 6, 7, 9, 10, 11});
  writer.write_box("s", Dims{}, Dims{}, Dims{}, Values{2.5F});  // a 0-d tensor
  EXPECT_EQ(store.writes, (std::vector<std::string>{"w@[0:3,0:1]", "w@[0:3,1:4]", "s@[]"}));
  Values expected(12);
  std::iota(expected.begin(), expected.end(), 0.0F);
  EXPECT_EQ(store.tensors.at("w").values, expected);

  const auto reader_table = store.reader();
  const sdk::StateReader reader(host, &reader_table);
  Values rows(4);
  reader.read_box("w", shape, Dims{1, 2}, Dims{2, 2}, rows);
  EXPECT_EQ(rows, (Values{6, 7, 10, 11}));
  Values none;
  reader.read_box("w", shape, Dims{0, 2}, Dims{3, 0}, none);  // zero extent
  float scalar = 0;
  reader.read_box("s", Dims{}, Dims{}, Dims{}, std::span<float>(&scalar, 1));
  EXPECT_EQ(scalar, 2.5F);

  // A 3-d box of a tensor written flat.
  const Dims cube{2, 3, 4};
  Values all(24);
  std::iota(all.begin(), all.end(), 0.0F);
  writer.write("c", cube, 0, all);
  Values part(6);
  reader.read_box("c", cube, Dims{1, 0, 1}, Dims{1, 3, 2}, part);
  EXPECT_EQ(part, (Values{13, 14, 17, 18, 21, 22}));

  // Buffers of another size and boxes of another rank are refused before
  // the host is called; a box past the end by the host.
  Values three(3);
  EXPECT_THROW(reader.read_box("w", shape, Dims{0, 0}, Dims{2, 2}, three), Error);
  EXPECT_THROW(writer.write_box("w", shape, Dims{0}, Dims{3}, three), Error);
  EXPECT_THROW(writer.write_box("w", shape, Dims{0, 0}, Dims{3, -1}, none), Error);
  EXPECT_THROW(reader.read_box("w", shape, Dims{2, 0}, Dims{3, 1}, three), Error);
}

}  // namespace
}  // namespace tessera::test

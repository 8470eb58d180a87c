// Parameter shards of a tensor-parallel group (see shards.hpp).
#include "shards.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>

namespace tessera::model::testing {
namespace {

// The tensor as [outer, inner] around the split dimension: `column` splits
// inner (the last dimension), `row` outer (the first).
struct SplitGeometry {
  int64_t outer = 1;  // rows of the 2-D view
  int64_t inner = 1;  // columns of the 2-D view
  bool by_rows = false;
};

SplitGeometry geometry_of(const ParamSpec& spec) {
  SplitGeometry g;
  const int64_t n = spec.numel();
  if (spec.split == SplitHint::row) {
    g.by_rows = true;
    g.outer = spec.shape.empty() ? 1 : spec.shape.front();
    g.inner = g.outer > 0 ? n / g.outer : 0;
  } else {
    g.inner = spec.shape.empty() ? 1 : spec.shape.back();
    g.outer = g.inner > 0 ? n / g.inner : 0;
  }
  return g;
}

// Copies between whole and shard: for each block b and each index i of the
// rank's part of the split dimension, one element (by columns) or one row.
template <typename Fn>
void for_each_shard_index(const ParamSpec& spec, int rank, int size, Fn&& fn) {
  const SplitGeometry g = geometry_of(spec);
  const int64_t blocks = spec.split_blocks;
  const int64_t split = g.by_rows ? g.outer : g.inner;
  const int64_t block = split / blocks;
  const int64_t part = block / size;
  ASSERT_EQ(part * size * blocks, split) << spec.name << " does not split into " << size;
  if (g.by_rows) {
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t i = 0; i < part; ++i) {
        const int64_t whole_row = b * block + rank * part + i;
        const int64_t shard_row = b * part + i;
        for (int64_t j = 0; j < g.inner; ++j) fn(whole_row * g.inner + j, shard_row * g.inner + j);
      }
    }
    return;
  }
  const int64_t shard_cols = blocks * part;
  for (int64_t r = 0; r < g.outer; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t i = 0; i < part; ++i) {
        fn(r * g.inner + b * block + rank * part + i, r * shard_cols + b * part + i);
      }
    }
  }
}

bool splits_evenly(const ParamSpec& spec, int size) {
  const SplitGeometry g = geometry_of(spec);
  const int64_t split = g.by_rows ? g.outer : g.inner;
  return split % (static_cast<int64_t>(spec.split_blocks) * size) == 0;
}

}  // namespace

bool held_whole(const ParamSpec& spec, int size) {
  return spec.split == SplitHint::none || size == 1 || !splits_evenly(spec, size);
}

std::vector<float> shard_of(const ParamSpec& spec, std::span<const float> whole, int rank,
                            int size) {
  if (held_whole(spec, size)) {
    // Undivided also where the split does not divide: the units refuse such
    // a group before they read a parameter, or (mlp's head) compute whole.
    return {whole.begin(), whole.end()};
  }
  std::vector<float> shard(whole.size() / static_cast<std::size_t>(size));
  for_each_shard_index(spec, rank, size, [&](int64_t w, int64_t s) { shard[s] = whole[w]; });
  return shard;
}

void place_shard(const ParamSpec& spec, std::span<const float> shard, std::span<float> whole,
                 int rank, int size) {
  if (held_whole(spec, size)) {
    std::copy(shard.begin(), shard.end(), whole.begin());
    return;
  }
  for_each_shard_index(spec, rank, size, [&](int64_t w, int64_t s) { whole[w] = shard[s]; });
}

}  // namespace tessera::model::testing

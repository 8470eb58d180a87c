// Parameter shards of a tensor-parallel group, as the tensor strategy cuts
// them: what the checks of the units under a group hand each rank.
#pragma once

#include <span>
#include <vector>

#include "tessera/models/unit.hpp"

namespace tessera::model::testing {

// Whether a rank of a group of `size` holds `spec` whole: not split, a
// group of one, or a split the group does not divide (a classifier head
// the tensor strategy keeps replicated).
bool held_whole(const ParamSpec& spec, int size);

// This rank's part of `whole` (a parameter of `spec`'s shape) in a group of
// `size`, as the split hint says: `column` the last dimension, `row` the
// first, each of `split_blocks` blocks alike; `none`, or a split `size`
// does not divide, the whole tensor.
std::vector<float> shard_of(const ParamSpec& spec, std::span<const float> whole, int rank,
                            int size);
// Writes `shard` (from shard_of) back into its place in `whole`.
void place_shard(const ParamSpec& spec, std::span<const float> shard, std::span<float> whole,
                 int rank, int size);

}  // namespace tessera::model::testing

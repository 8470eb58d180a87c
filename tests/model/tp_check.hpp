// Checks of the in-tree units under tensor parallelism: each rank of an
// in-memory group (threads) runs a unit, or a whole model, on its shards of
// the parameters, and the outputs, input gradients and reassembled
// parameter gradients are compared with the whole unit on one rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "shards.hpp"
#include "tessera/c/model.h"
#include "tessera/core/data/batch.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/models/unit.hpp"

namespace tessera::model::testing {

// Runs body(rank, group) on `size` ranks of a fresh `inmemory` backend, one
// thread each (20 s timeout per collective; a failing rank aborts the
// others), the group's flags set to `flags` (TESSERA_TP_*). Rethrows the
// first rank's failure.
void run_tp_ranks(int size, const std::function<void(int rank, const tessera_tp_group& tp)>& body,
                  uint32_t flags = 0);

// Sequence parallelism's row slices (TESSERA_TP_SEQUENCE) of a [rows,
// width] activation of `batch` (rows: tokens of a sequence batch, split by
// position within each example; examples of a feature batch, split in
// contiguous blocks): rank `rank`'s slice of `whole`, and `whole` put back
// together from every rank's slice.
std::vector<float> row_slice(const Batch& batch, std::span<const float> whole, int64_t width,
                             int rank, int size);
std::vector<float> join_row_slices(const Batch& batch,
                                   const std::vector<std::vector<float>>& slices, int64_t width);

// Parameters of `unit` for a rank of a group of `size` with every value
// `value`: a split tensor's shard (1/size of it), a replicated one whole;
// and pointers to them.
struct ConstantParams {
  std::vector<std::vector<float>> values;
  std::vector<const float*> ptrs;
};
ConstantParams constant_params(const Unit& unit, int size, float value);

// unit.forward on `ctx` in `group` (set on the context too) with `params`
// and x = `rows` rows of `x` (`x` empty: the first unit, no input).
ConstView forward_in_group(const Unit& unit, UnitContext& ctx, std::span<const float* const> params,
                           const BatchView& batch, const tessera_tp_group& group,
                           std::span<const float> x, int64_t rows);

// The unit on `batch` (input x of `input_cols` columns, 0 for the first
// unit) with random whole parameters, x and output gradient from `seed`:
// forward and backward of the whole unit without a group, against every
// rank of a group of `tp` on its shards (backward_input then
// backward_weight when `split_halves`). Expects on every rank the same
// output (the loss for the last unit) and input gradient, and every
// parameter's gradient — the shards' reassembled, a replicated one on each
// rank — within 1e-5 · max |whole| per tensor.
//
// With `sequence` the group has TESSERA_TP_SEQUENCE: a rank gets its row
// slice (row_slice) of x and of the output gradient, its output and input
// gradient are compared with the slices of the whole ones (the last unit's
// loss whole), and a replicated parameter's gradients summed over the
// ranks with the whole one.
void expect_unit_tp_matches(const Unit& unit, const Batch& batch, int64_t input_cols, int tp,
                            uint64_t seed, bool split_halves = false, bool sequence = false);

// The whole model (ties resolved: a tied slot gets its owner's shard and
// gradient) on `batch`: forward through every unit, backward from the
// loss, on every rank of a group of `tp`, against the same on one rank
// without a group: the loss within 1e-5 relative, every owned parameter's
// gradient within 1e-5 · max |whole|. With `plugin` (the same model built
// by its plugin), the ranks call its C table instead of the units, so the
// adapter hands each call's group to the unit. With `sequence` the group
// has TESSERA_TP_SEQUENCE and a replicated parameter's gradients are
// summed over the ranks before the comparison.
void expect_model_tp_matches(std::span<const std::unique_ptr<Unit>> units, const Batch& batch,
                             int tp, uint64_t seed, const tessera::model::Model* plugin = nullptr,
                             bool sequence = false);

// What each unit's context holds on rank 0 of a group of `tp` (flags
// TESSERA_TP_SEQUENCE with `sequence`) after a forward and backward of the
// whole model on `batch`, every parameter (a shard where split) constant,
// and the bytes of each unit's forward output on that rank.
struct ContextBytes {
  std::vector<int64_t> context;
  std::vector<int64_t> output;
};
ContextBytes model_context_bytes(std::span<const std::unique_ptr<Unit>> units, const Batch& batch,
                                 int tp, bool sequence);

// The unit with a group of one rank gives bit for bit what it gives without
// a group: output, input gradient and every parameter gradient.
void expect_tp_one_is_identical(const Unit& unit, const Batch& batch, int64_t input_cols,
                                uint64_t seed);

// The message of the tessera::Error (with `status`) that the forward of
// `unit` on rank 0 of a group of `tp` throws with whole-sized random
// buffers (the group's flags `flags`); fails the test when no rank throws.
std::string tp_forward_error(const Unit& unit, const Batch& batch, int64_t input_cols, int tp,
                             tessera_status status, uint32_t flags = 0);

}  // namespace tessera::model::testing

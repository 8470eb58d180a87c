// Checks of a unit's split backward (TESSERA_UNIT_SPLIT_BACKWARD) against its
// whole backward, shared by the gpt and llama split tests.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "tessera/core/data/batch.hpp"
#include "tessera/models/unit.hpp"

namespace tessera::model::testing {

// Runs `unit` on two micro-batches `a` and `b` (batches of the unit's input
// shape; `input_cols` is the width of x, 0 for the first unit) with random
// parameters, inputs and output gradients from `seed`. Reference: forward
// and backward of each alone, adding into gradient buffers that start at the
// same random values. Split: forward a, forward b, backward_input b,
// backward_input a, backward_weight a, backward_weight b, on two contexts,
// with the caller's x and output gradients overwritten before the weight
// halves.
// Expects the unit to declare the split, the same input gradient and the
// same gradient of every parameter per micro-batch (per tensor max |split −
// whole| ≤ 1e-6 · max |whole|; every gradient changed), and each context
// to grow by at least `kept_per_row` floats per row of its batch between
// its forward and the end of its input half (what the weight half needs is
// counted by bytes()).
void expect_split_matches_backward(const Unit& unit, const Batch& a, const Batch& b,
                                   int64_t input_cols, int64_t kept_per_row, uint64_t seed);

// Expects backward_weight to be refused with INVALID_ARGUMENT naming the
// unit ("unit '<name>': backward_weight without backward_input on this
// context") after a forward alone, after a completed pair of halves, and
// after a new forward that followed an input half; and backward_input
// without a forward ("unit '<name>': backward without a forward").
void expect_weight_half_refused(const Unit& unit, const Batch& batch, int64_t input_cols,
                                uint64_t seed);

// A whole model's units (ties resolved here: a tied slot gets its owner's
// parameter and gradient buffer) on micro-batches `a` and `b`: every
// forward of a, every forward of b, the input halves of b from the last
// unit down, those of a, then the weight halves of a and of b, against the
// whole backward of a then b into gradient buffers with the same random
// start. Expects every owned gradient within 1e-6 · max |whole| per tensor.
void expect_model_split_matches_backward(std::span<const std::unique_ptr<Unit>> units,
                                         const Batch& a, const Batch& b, uint64_t seed);

}  // namespace tessera::model::testing

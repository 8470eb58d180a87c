// Finite-difference checks of a unit's hand-written backward pass.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/data/batch.hpp"
#include "tessera/models/unit.hpp"

namespace tessera::model::testing {

// Random values normal(0, std) from `seed` (test data, not model init).
std::vector<float> random_values(int64_t count, float std, uint64_t seed);

// Compares the analytic gradients of `unit` against central differences of
// the objective J = Σ output ⊙ R (R a random projection; for the last unit J
// = r · loss with a random scalar r). Parameters are random normal(0,
// param_std) (biases and gains included, so no term hides behind a zero or
// a one). `input` is the previous unit's output (empty for the first unit,
// which reads the batch). Checks every parameter tensor and the input
// gradient with gtest expectations: per tensor ‖analytic − fd‖ ≤ 1e-2 ·
// ‖fd‖ + 1e-4, and that the gradient is not identically zero.
void expect_gradients_match(const Unit& unit, const Batch& batch, const std::vector<float>& input,
                            int64_t input_cols, float param_std, float eps, uint64_t seed);

}  // namespace tessera::model::testing

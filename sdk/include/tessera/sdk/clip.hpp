// Gradient clipping by global L2 norm, the one implementation shared by the
// core (tessera/core/optim/clip.hpp delegates here) and every strategy.
//
// A strategy whose gradients are replicated computes sum_squares() over the
// whole gradient; a sharded one computes it over the elements it owns (each
// element counted by exactly one rank) and allreduces the partial sums as
// f64 before calling clip_coefficient(). Sums are accumulated in double, so
// the norm of one buffer and of any split of it agree to double rounding,
// far below f32 resolution.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

#include "tessera/c/common.h"
#include "tessera/sdk/error.hpp"

namespace tessera::sdk {

// Sum of the squares of `grads`, accumulated in double (four interleaved
// partial sums, combined in a fixed order: the result depends only on the
// values, not on the machine).
[[nodiscard]] inline double sum_squares(std::span<const float> grads) noexcept {
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  const size_t n = grads.size();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (size_t k = 0; k < 4; ++k) {
      const auto d = static_cast<double>(grads[i + k]);
      acc[k] += d * d;
    }
  }
  for (; i < n; ++i) {
    const auto d = static_cast<double>(grads[i]);
    acc[0] += d * d;
  }
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// The global L2 norm from the total sum of squares over all shards.
[[nodiscard]] inline double global_grad_norm(double total_sum_squares) noexcept {
  return std::sqrt(total_sum_squares);
}

// Factor to multiply every gradient by so the global norm is at most
// `max_norm`: min(1, max_norm / (norm + 1e-6)); 1 when `max_norm` <= 0
// (clipping off). Throws tessera::Error (invalid argument) when the total is
// negative or the norm is not finite (NaN or infinite gradients), naming the
// norm, so a diverged run stops instead of corrupting the parameters (the
// check runs with clipping off too).
[[nodiscard]] inline float clip_coefficient(double total_sum_squares, double max_norm) {
  const char* what = max_norm > 0.0 ? "gradient clipping" : "gradient check";
  TESSERA_CHECK(!(total_sum_squares < 0.0), TESSERA_ERR_INVALID_ARGUMENT, what, ": sum of squares ",
                total_sum_squares, " is negative");
  const double norm = global_grad_norm(total_sum_squares);
  TESSERA_CHECK(std::isfinite(norm), TESSERA_ERR_INVALID_ARGUMENT, what,
                ": the global gradient norm is ", norm, " (NaN or infinite gradients)");
  if (max_norm <= 0.0) return 1.0F;
  return static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
}

// Multiplies every element of `grads` by `factor` (nothing when factor is 1).
inline void scale_in_place(std::span<float> grads, float factor) noexcept {
  if (factor == 1.0F) return;
  for (float& g : grads) g *= factor;
}

// Clips `grads` (this rank's gradients) given the global sum of squares
// over all ranks' gradients, and returns the global norm before clipping.
// Same failures as clip_coefficient, checked before anything is modified.
inline double clip_by_global_norm(std::span<float> grads, double total_sum_squares,
                                  double max_norm) {
  const float factor = clip_coefficient(total_sum_squares, max_norm);
  scale_in_place(grads, factor);
  return global_grad_norm(total_sum_squares);
}

}  // namespace tessera::sdk

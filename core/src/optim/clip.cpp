// Global-norm gradient clipping from per-shard sums of squares.
#include "tessera/core/optim/clip.hpp"

#include <algorithm>
#include <cmath>

#include "tessera/sdk/error.hpp"

namespace tessera {

double sum_squares(std::span<const float> grads) noexcept {
  double total = 0.0;
  for (const float g : grads) {
    const double d = static_cast<double>(g);
    total += d * d;
  }
  return total;
}

double global_grad_norm(double total_sum_squares) noexcept { return std::sqrt(total_sum_squares); }

float clip_coefficient(double total_sum_squares, double max_norm) {
  TESSERA_CHECK(!(total_sum_squares < 0.0), TESSERA_ERR_INVALID_ARGUMENT,
                "gradient clipping: sum of squares ", total_sum_squares, " is negative");
  const double norm = global_grad_norm(total_sum_squares);
  TESSERA_CHECK(std::isfinite(norm), TESSERA_ERR_INVALID_ARGUMENT,
                "gradient clipping: the global gradient norm is ", norm,
                " (NaN or infinite gradients)");
  if (max_norm <= 0.0) {
    return 1.0F;
  }
  return static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
}

void scale_in_place(std::span<float> grads, float factor) noexcept {
  if (factor == 1.0F) {
    return;
  }
  for (float& g : grads) {
    g *= factor;
  }
}

}  // namespace tessera

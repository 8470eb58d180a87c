// Global-norm gradient clipping: the core's entry points over the SDK's
// implementation (tessera/sdk/clip.hpp), so strategies and the core share
// one piece of math.
#include "tessera/core/optim/clip.hpp"

#include "tessera/sdk/clip.hpp"

namespace tessera {

double sum_squares(std::span<const float> grads) noexcept { return sdk::sum_squares(grads); }

double global_grad_norm(double total_sum_squares) noexcept {
  return sdk::global_grad_norm(total_sum_squares);
}

float clip_coefficient(double total_sum_squares, double max_norm) {
  return sdk::clip_coefficient(total_sum_squares, max_norm);
}

void scale_in_place(std::span<float> grads, float factor) noexcept {
  sdk::scale_in_place(grads, factor);
}

}  // namespace tessera

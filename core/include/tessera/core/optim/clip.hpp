// Gradient clipping by global norm, computed correctly when the gradients
// are sharded across ranks.
//
// Each rank computes sum_squares() over the gradient elements it owns (every
// element counted by exactly one rank), the partial sums are allreduced
// (sum, f64), and every rank derives the same coefficient from the total
// with clip_coefficient() and scales its own shard with scale_in_place().
// Accumulating in double keeps the norm of one shard and of any split into
// N shards equal to within double rounding, far below f32 resolution.
// The implementation is the SDK's (tessera/sdk/clip.hpp), which strategy
// plugins call directly.
#pragma once

#include <span>

namespace tessera {

// Sum of the squares of `grads`, accumulated in double.
[[nodiscard]] double sum_squares(std::span<const float> grads) noexcept;

// The global L2 norm from the total sum of squares over all shards.
[[nodiscard]] double global_grad_norm(double total_sum_squares) noexcept;

// Factor to multiply every gradient by so the global norm is at most
// `max_norm`: min(1, max_norm / (norm + 1e-6)). `max_norm` <= 0 turns
// clipping off (factor 1). Throws tessera::Error (invalid argument) when the
// total is negative or the norm is not finite (NaN or infinite gradients),
// naming the norm, so a diverged run stops instead of corrupting the
// parameters.
[[nodiscard]] float clip_coefficient(double total_sum_squares, double max_norm);

// Multiplies every element of `grads` by `factor` (nothing when factor is 1).
void scale_in_place(std::span<float> grads, float factor) noexcept;

}  // namespace tessera

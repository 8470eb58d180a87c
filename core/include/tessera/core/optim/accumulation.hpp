// Gradient accumulation over micro-batches.
//
// Contract shared by the models, the strategies and the optimizers:
//  * The loss of a step is the mean over the GLOBAL batch (all data-parallel
//    ranks, all micro-batches): each example's loss carries the weight
//    1 / global_examples. A micro-batch whose loss is the mean over its own
//    m examples is therefore multiplied by micro_batch_loss_scale(m, G) =
//    m / G before the backward pass.
//  * Strategies ADD the gradients of every micro-batch (accumulate_gradients)
//    and then SUM them across data-parallel ranks (allreduce sum, or
//    reduce-scatter sum for sharded strategies). The result is already the
//    gradient of the global mean loss: no division by the number of
//    micro-batches or ranks follows, and uneven splits (ranks or
//    micro-batches of different sizes) are weighted correctly.
//  * Clipping (clip.hpp) and the optimizer step come after the reduction,
//    once per global step.
#pragma once

#include <cstdint>
#include <span>

namespace tessera {

// Weight of a micro-batch's mean loss: micro_examples / global_examples.
// Throws tessera::Error (invalid argument) when global_examples < 1 or
// micro_examples is outside [0, global_examples].
[[nodiscard]] float micro_batch_loss_scale(int64_t micro_examples, int64_t global_examples);

// accumulated[i] += micro_grads[i]. Throws tessera::Error (invalid argument)
// when the lengths differ.
void accumulate_gradients(std::span<float> accumulated, std::span<const float> micro_grads);

}  // namespace tessera

// Micro-batch loss weights and gradient accumulation.
#include "tessera/core/optim/accumulation.hpp"

#include "tessera/sdk/error.hpp"

namespace tessera {

float micro_batch_loss_scale(int64_t micro_examples, int64_t global_examples) {
  TESSERA_CHECK(global_examples >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                "gradient accumulation: global batch of ", global_examples,
                " examples (must be >= 1)");
  TESSERA_CHECK(micro_examples >= 0 && micro_examples <= global_examples,
                TESSERA_ERR_INVALID_ARGUMENT, "gradient accumulation: micro-batch of ",
                micro_examples, " examples does not fit a global batch of ", global_examples);
  return static_cast<float>(static_cast<double>(micro_examples) /
                            static_cast<double>(global_examples));
}

void accumulate_gradients(std::span<float> accumulated, std::span<const float> micro_grads) {
  TESSERA_CHECK(accumulated.size() == micro_grads.size(), TESSERA_ERR_INVALID_ARGUMENT,
                "gradient accumulation: accumulator has ", accumulated.size(),
                " elements, micro-batch gradients ", micro_grads.size());
  for (size_t i = 0; i < accumulated.size(); ++i) {
    accumulated[i] += micro_grads[i];
  }
}

}  // namespace tessera

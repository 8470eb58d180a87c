// OptimizerState storage and the argument checks shared by every rule.
#include "tessera/core/optim/optimizer.hpp"

#include <cmath>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera {

OptimizerState::OptimizerState(std::vector<std::string> slot_names, size_t elements)
    : names_(std::move(slot_names)), elements_(elements), values_(names_.size() * elements, 0.0F) {}

const std::string& OptimizerState::slot_name(size_t index) const {
  TESSERA_CHECK(index < names_.size(), TESSERA_ERR_INVALID_ARGUMENT, "optimizer state slot ", index,
                " does not exist (the state has ", names_.size(), " slots)");
  return names_[index];
}

std::span<float> OptimizerState::slot(size_t index) {
  TESSERA_CHECK(index < names_.size(), TESSERA_ERR_INVALID_ARGUMENT, "optimizer state slot ", index,
                " does not exist (the state has ", names_.size(), " slots)");
  return std::span<float>(values_).subspan(index * elements_, elements_);
}

std::span<const float> OptimizerState::slot(size_t index) const {
  TESSERA_CHECK(index < names_.size(), TESSERA_ERR_INVALID_ARGUMENT, "optimizer state slot ", index,
                " does not exist (the state has ", names_.size(), " slots)");
  return std::span<const float>(values_).subspan(index * elements_, elements_);
}

void Optimizer::check_step(std::span<float> params, std::span<const float> grads,
                           const OptimizerState& state, int64_t step, float lr) const {
  TESSERA_CHECK(params.size() == grads.size(), TESSERA_ERR_INVALID_ARGUMENT, "optimizer '", name(),
                "': ", params.size(), " parameters but ", grads.size(), " gradients");
  TESSERA_CHECK(step >= 1, TESSERA_ERR_INVALID_ARGUMENT, "optimizer '", name(), "': step ", step,
                " is invalid (the first update is step 1)");
  TESSERA_CHECK(std::isfinite(lr) && lr >= 0.0F, TESSERA_ERR_INVALID_ARGUMENT, "optimizer '",
                name(), "': learning rate ", lr, " must be finite and >= 0");
  const std::vector<std::string> expected = slot_names();
  TESSERA_CHECK(state.slots() == expected.size(), TESSERA_ERR_INVALID_ARGUMENT, "optimizer '",
                name(), "': state has ", state.slots(), " slots, the rule needs ", expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    TESSERA_CHECK(state.slot_name(k) == expected[k], TESSERA_ERR_INVALID_ARGUMENT, "optimizer '",
                  name(), "': state slot ", k, " is '", state.slot_name(k), "', expected '",
                  expected[k], "'");
  }
}

void Optimizer::step(std::span<float> params, std::span<const float> grads, OptimizerState& state,
                     int64_t step, float lr) const {
  check_step(params, grads, state, step, lr);
  if (slots() > 0) {
    TESSERA_CHECK(state.elements() == params.size(), TESSERA_ERR_INVALID_ARGUMENT, "optimizer '",
                  name(), "': state covers ", state.elements(), " elements but the shard has ",
                  params.size());
  }
  update(params, grads, state, 0, step, lr);
}

void Optimizer::step(std::span<float> params, std::span<const float> grads, OptimizerState& state,
                     size_t state_offset, int64_t step, float lr) const {
  check_step(params, grads, state, step, lr);
  if (slots() > 0) {
    TESSERA_CHECK(
        state_offset <= state.elements() && params.size() <= state.elements() - state_offset,
        TESSERA_ERR_INVALID_ARGUMENT, "optimizer '", name(), "': range [", state_offset, ", ",
        state_offset + params.size(), ") is outside the state of ", state.elements(), " elements");
  }
  update(params, grads, state, state_offset, step, lr);
}

}  // namespace tessera

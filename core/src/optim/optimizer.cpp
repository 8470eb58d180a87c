// OptimizerState storage and the argument checks shared by every rule.
#include "tessera/core/optim/optimizer.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "tessera/core/device.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {

namespace {

// The CPU loop of rule R over n elements.
template <optim::Rule R>
void update_range(const optim::ElementwiseStep& s, float* p, const float* g, float* s0, float* s1,
                  size_t n) {
  for (size_t i = 0; i < n; ++i) optim::update_element<R>(s, p, g, s0, s1, i);
}

}  // namespace

void OptimizerState::ManagedFree::operator()(float* values) const noexcept {
  device::managed_free(values);
}

OptimizerState::OptimizerState(std::vector<std::string> slot_names, size_t elements,
                               int32_t cuda_device)
    : names_(std::move(slot_names)), elements_(elements) {
  const size_t count = names_.size() * elements;
  if (cuda_device < 0 || count == 0) {
    values_.assign(count, 0.0F);
    return;
  }
  std::string error;
  void* values = device::managed_alloc(cuda_device, count * sizeof(float), error);
  TESSERA_CHECK(values != nullptr, TESSERA_ERR_OUT_OF_MEMORY,
                "optimizer state: ", error.empty() ? std::string("out of memory") : error);
  managed_.reset(static_cast<float*>(values));
}

const std::string& OptimizerState::slot_name(size_t index) const {
  TESSERA_CHECK(index < names_.size(), TESSERA_ERR_INVALID_ARGUMENT, "optimizer state slot ", index,
                " does not exist (the state has ", names_.size(), " slots)");
  return names_[index];
}

std::span<float> OptimizerState::slot(size_t index) {
  TESSERA_CHECK(index < names_.size(), TESSERA_ERR_INVALID_ARGUMENT, "optimizer state slot ", index,
                " does not exist (the state has ", names_.size(), " slots)");
  return {values() + index * elements_, elements_};
}

std::span<const float> OptimizerState::slot(size_t index) const {
  TESSERA_CHECK(index < names_.size(), TESSERA_ERR_INVALID_ARGUMENT, "optimizer state slot ", index,
                " does not exist (the state has ", names_.size(), " slots)");
  return {values() + index * elements_, elements_};
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

void Optimizer::update(std::span<float> params, std::span<const float> grads, OptimizerState& state,
                       size_t state_offset, int64_t step, float lr) const {
  const size_t n = params.size();
  if (n == 0) return;
  const optim::ElementwiseStep s = elementwise_step(step, lr);
  float* p = params.data();
  const float* g = grads.data();
  float* s0 = state.slots() > 0 ? state.slot(0).data() + state_offset : nullptr;
  float* s1 = state.slots() > 1 ? state.slot(1).data() + state_offset : nullptr;
  if (device::optimizer_step_on_cuda(s, p, g, s0, s1, n)) return;
  switch (s.rule) {
    case optim::Rule::sgd:
      update_range<optim::Rule::sgd>(s, p, g, s0, s1, n);
      break;
    case optim::Rule::momentum:
      update_range<optim::Rule::momentum>(s, p, g, s0, s1, n);
      break;
    case optim::Rule::adam:
      update_range<optim::Rule::adam>(s, p, g, s0, s1, n);
      break;
  }
}

}  // namespace tessera

// Strategy-side view of the host's optimizer (tessera_optimizer_api,
// c/strategy.h): per-range state and the element-wise update.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "tessera/c/strategy.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::sdk {

// Optimizer state of one flat range; destroys itself.
class OptimState {
 public:
  OptimState() = default;
  OptimState(const tessera_optimizer_api* api, tessera_optim_state* state, uint64_t elements,
             int32_t slots)
      : api_(api), state_(state), elements_(elements), slots_(slots) {}
  OptimState(OptimState&& o) noexcept
      : api_(o.api_),
        state_(std::exchange(o.state_, nullptr)),
        elements_(o.elements_),
        slots_(o.slots_) {}
  OptimState& operator=(OptimState&& o) noexcept {
    if (this != &o) {
      reset();
      api_ = o.api_;
      state_ = std::exchange(o.state_, nullptr);
      elements_ = o.elements_;
      slots_ = o.slots_;
    }
    return *this;
  }
  OptimState(const OptimState&) = delete;
  OptimState& operator=(const OptimState&) = delete;
  ~OptimState() { reset(); }

  [[nodiscard]] tessera_optim_state* raw() const noexcept { return state_; }
  [[nodiscard]] uint64_t elements() const noexcept { return elements_; }
  [[nodiscard]] int32_t slots() const noexcept { return slots_; }
  // Values of slot `k` (elements() of them).
  [[nodiscard]] std::span<float> slot(int32_t k) const {
    TESSERA_CHECK(k >= 0 && k < slots_, TESSERA_ERR_INVALID_ARGUMENT, "optimizer slot ", k,
                  " out of range");
    return {api_->state_slot(state_, k), static_cast<size_t>(elements_)};
  }
  void reset() noexcept {
    if (state_ != nullptr) api_->state_destroy(state_);
    state_ = nullptr;
  }

 private:
  const tessera_optimizer_api* api_ = nullptr;
  tessera_optim_state* state_ = nullptr;
  uint64_t elements_ = 0;
  int32_t slots_ = 0;
};

class OptimizerView {
 public:
  OptimizerView(const Host& host, const tessera_optimizer_api* api, const tessera_optimizer* opt)
      : host_(host), api_(api), opt_(opt) {
    TESSERA_CHECK(api != nullptr && opt != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                  "strategy environment has no optimizer");
  }
  [[nodiscard]] std::string name() const { return api_->name(opt_); }
  [[nodiscard]] int32_t num_slots() const noexcept { return api_->num_slots(opt_); }
  [[nodiscard]] std::string slot_name(int32_t k) const {
    const char* s = api_->slot_name(opt_, k);
    return s != nullptr ? s : "";
  }
  [[nodiscard]] OptimState make_state(uint64_t elements) const {
    tessera_optim_state* st = nullptr;
    detail::check_host_call(host_, api_->state_create(opt_, elements, &st),
                            "optimizer state_create");
    return {api_, st, elements, num_slots()};
  }
  // Updates params[0, n) using state elements [state_offset, state_offset + n).
  void step(OptimState& state, uint64_t state_offset, std::span<float> params,
            std::span<const float> grads, int64_t step, float lr) const {
    TESSERA_CHECK(params.size() == grads.size(), TESSERA_ERR_INVALID_ARGUMENT,
                  "optimizer step: ", params.size(), " parameters but ", grads.size(),
                  " gradients");
    detail::check_host_call(host_,
                            api_->step(opt_, state.raw(), state_offset, params.data(), grads.data(),
                                       params.size(), step, lr),
                            "optimizer step");
  }

 private:
  Host host_;
  const tessera_optimizer_api* api_;
  const tessera_optimizer* opt_;
};

}  // namespace tessera::sdk

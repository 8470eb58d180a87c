// tessera_optimizer_api over the core's Optimizer (see strategy_host.hpp).
//
// Handles: a tessera_optimizer* is the tessera::Optimizer; a
// tessera_optim_state* is an OptimState below, which remembers the rank it
// was counted against so that destroying it on any thread releases exactly
// what creating it tracked.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "host_call.hpp"
#include "tessera/core/device.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/train/strategy_host.hpp"

// Per-element optimizer state of one flat range, as the C side sees it.
struct tessera_optim_state {
  tessera::OptimizerState state;
  int rank = -1;              // rank whose TESSERA_MEM_OPTIMIZER counts its bytes
  int64_t tracked_bytes = 0;  // what state_create added
};

namespace tessera::train {
namespace {

const Optimizer* as_optimizer(const tessera_optimizer* opt) noexcept {
  return reinterpret_cast<const Optimizer*>(opt);
}

// "optimizer 'adamw' <what>", the prefix of a failed call's message.
std::string call_name(const tessera_optimizer* opt, const char* what) {
  if (opt == nullptr) return std::string("optimizer ") + what;
  return "optimizer '" + as_optimizer(opt)->name() + "' " + what;
}

const char* name(const tessera_optimizer* opt) noexcept {
  return opt != nullptr ? as_optimizer(opt)->name().c_str() : nullptr;
}

int32_t num_slots(const tessera_optimizer* opt) noexcept {
  return opt != nullptr ? static_cast<int32_t>(as_optimizer(opt)->slots()) : 0;
}

const char* slot_name(const tessera_optimizer* opt, int32_t slot) noexcept {
  if (opt == nullptr || slot < 0) return nullptr;
  try {
    const std::vector<std::string> names = as_optimizer(opt)->slot_names();
    if (static_cast<std::size_t>(slot) >= names.size()) return nullptr;
    return detail::interned(names[static_cast<std::size_t>(slot)]);
  } catch (...) {
    return nullptr;  // out of memory
  }
}

tessera_status state_create(const tessera_optimizer* opt, uint64_t elements,
                            tessera_optim_state** out) noexcept {
  return detail::guard_host_call(
      [&] { return call_name(opt, "state_create"); },
      [&] {
        TESSERA_CHECK(opt != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "optimizer is NULL");
        TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "output is NULL");
        const Optimizer& o = *as_optimizer(opt);
        auto state = std::make_unique<tessera_optim_state>();
        // On a CUDA run in managed memory of the rank's device, where the
        // strategies' parameters and gradients are: the update runs there.
        const bool cuda = run_device() == ComputeDevice::cuda;
        state->state =
            o.make_state(static_cast<std::size_t>(elements), cuda ? rank_device_ordinal() : -1);
        state->rank = thread_rank();
        state->tracked_bytes = static_cast<int64_t>(state->state.bytes());
        MemoryTracker::instance().add(state->rank, TESSERA_MEM_OPTIMIZER, state->tracked_bytes);
        *out = state.release();
      });
}

void state_destroy(tessera_optim_state* state) noexcept {
  if (state == nullptr) return;
  MemoryTracker::instance().add(state->rank, TESSERA_MEM_OPTIMIZER, -state->tracked_bytes);
  delete state;
}

float* state_slot(tessera_optim_state* state, int32_t slot) noexcept {
  if (state == nullptr || slot < 0 || static_cast<std::size_t>(slot) >= state->state.slots()) {
    return nullptr;
  }
  return state->state.slot(static_cast<std::size_t>(slot)).data();
}

tessera_status step_range(const tessera_optimizer* opt, tessera_optim_state* state,
                          uint64_t state_offset, float* params, const float* grads, uint64_t count,
                          int64_t step, float lr) noexcept {
  return detail::guard_host_call(
      [&] { return call_name(opt, "step"); },
      [&] {
        TESSERA_CHECK(opt != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "optimizer is NULL");
        const Optimizer& o = *as_optimizer(opt);
        TESSERA_CHECK(state != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "state is NULL");
        TESSERA_CHECK((params != nullptr && grads != nullptr) || count == 0,
                      TESSERA_ERR_INVALID_ARGUMENT, "parameters or gradients are NULL for ", count,
                      " elements");
        const auto n = static_cast<std::size_t>(count);
        o.step(std::span<float>(params, n), std::span<const float>(grads, n), state->state,
               static_cast<std::size_t>(state_offset), step, lr);
      });
}

constexpr tessera_optimizer_api kOptimizerApi = {sizeof(tessera_optimizer_api),
                                                 0,
                                                 &name,
                                                 &num_slots,
                                                 &slot_name,
                                                 &state_create,
                                                 &state_destroy,
                                                 &state_slot,
                                                 &step_range};

}  // namespace

const tessera_optimizer_api* optimizer_api() noexcept { return &kOptimizerApi; }

const tessera_optimizer* as_c_optimizer(const Optimizer& optimizer) noexcept {
  return reinterpret_cast<const tessera_optimizer*>(&optimizer);
}

}  // namespace tessera::train

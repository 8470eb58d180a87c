// Optimizers that update one flat f32 shard of parameters in place.
//
// Every strategy (ddp, zero1-3, fsdp, ...) owns some contiguous range of the
// flattened parameters and calls the same Optimizer on it. The update is
// purely element-wise: element i of the result depends only on element i of
// the parameters, gradients and state, the step number and the learning rate.
// Updating a tensor whole or as any set of shards therefore gives
// bit-identical results, and a rank owning 1/N of the parameters allocates
// 1/N of the optimizer state (ZeRO).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/config.hpp"
#include "tessera/core/optim/elementwise.hpp"

namespace tessera {

// Per-element optimizer state of one shard: `slots` named f32 arrays of the
// shard's length (momentum buffer; Adam's first and second moments), all
// zero when created. The spans stay valid for the state's lifetime, so a
// checkpoint writer can save them by name and a reader can fill them back.
class OptimizerState {
 public:
  OptimizerState() = default;
  // State for `elements` values with one zeroed array per name, in ordinary
  // memory, or with `cuda_device` >= 0 in CUDA managed memory of that
  // device (a CUDA run: the update then runs on the device, where the
  // parameters are, and host code still reads and writes the values).
  // Throws tessera::Error (out of memory) naming the bytes and the device
  // when the CUDA runtime refuses.
  OptimizerState(std::vector<std::string> slot_names, size_t elements, int32_t cuda_device = -1);

  // Number of parameter elements the state covers.
  [[nodiscard]] size_t elements() const noexcept { return elements_; }
  // Number of per-element arrays.
  [[nodiscard]] size_t slots() const noexcept { return names_.size(); }
  // Name of slot `index` ("momentum_buffer", "exp_avg", "exp_avg_sq").
  // Throws tessera::Error (invalid argument) when `index` >= slots().
  [[nodiscard]] const std::string& slot_name(size_t index) const;
  // Values of slot `index`; same failure as slot_name.
  [[nodiscard]] std::span<float> slot(size_t index);
  [[nodiscard]] std::span<const float> slot(size_t index) const;
  // Bytes held by all slots together.
  [[nodiscard]] size_t bytes() const noexcept { return names_.size() * elements_ * sizeof(float); }
  // Whether the values are CUDA managed memory.
  [[nodiscard]] bool on_cuda() const noexcept { return managed_ != nullptr; }

 private:
  struct ManagedFree {
    void operator()(float* values) const noexcept;
  };
  [[nodiscard]] float* values() noexcept { return on_cuda() ? managed_.get() : values_.data(); }
  [[nodiscard]] const float* values() const noexcept {
    return on_cuda() ? managed_.get() : values_.data();
  }

  std::vector<std::string> names_;
  size_t elements_ = 0;
  // slot-major: slot k at [k*elements_, (k+1)*elements_), in one of these
  std::vector<float> values_;
  std::unique_ptr<float, ManagedFree> managed_;
};

// Hyper-parameters shared by the update rules; each rule reads the ones it
// needs. The learning rate is not here: it is passed to every step so a
// schedule can change it.
struct OptimizerParams {
  double weight_decay = 0.0;  // sgd/momentum/adam: L2 added to the gradient;
                              // adamw: decoupled, p *= 1 - lr * weight_decay
  double momentum = 0.9;      // momentum
  double dampening = 0.0;     // momentum
  bool nesterov = false;      // momentum
  double beta1 = 0.9;         // adam, adamw
  double beta2 = 0.999;       // adam, adamw
  double eps = 1e-8;          // adam, adamw
};

// An update rule over flat f32 shards.
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // The rule's name ("sgd", "momentum", "adam", "adamw").
  [[nodiscard]] virtual const std::string& name() const noexcept = 0;
  // Number of f32 state values per parameter element (sgd 0, momentum 1,
  // adam and adamw 2).
  [[nodiscard]] virtual size_t slots() const noexcept = 0;
  // Names of those state arrays, in slot order.
  [[nodiscard]] virtual std::vector<std::string> slot_names() const = 0;
  // Bytes of state needed for a shard of `elements` parameters.
  [[nodiscard]] size_t state_bytes(size_t elements) const noexcept {
    return slots() * elements * sizeof(float);
  }
  // Zeroed state for a shard of `elements` parameters (in managed memory
  // of CUDA device `cuda_device` when it is >= 0, see OptimizerState).
  [[nodiscard]] OptimizerState make_state(size_t elements, int32_t cuda_device = -1) const {
    return OptimizerState(slot_names(), elements, cuda_device);
  }
  // The scalars of update number `step` with learning rate `lr` (checked
  // by step() below), which the element-wise update (elementwise.hpp)
  // applies to every element.
  [[nodiscard]] virtual optim::ElementwiseStep elementwise_step(int64_t step, float lr) const = 0;

  // Applies update number `step` (1 for the first update; Adam's bias
  // correction uses it) with learning rate `lr` to `params` in place, given
  // `grads` (already averaged and clipped) and the shard's `state`. On a
  // CUDA run (tessera/core/device.hpp) where the parameters, gradients and
  // state are all CUDA memory of one device, the update runs there (one
  // kernel, done when step returns); otherwise on the CPU. Both give
  // bit-identical results (elementwise.hpp).
  // Throws tessera::Error (invalid argument) when the lengths of params,
  // grads and state differ, the state has the wrong slots, step < 1, or lr
  // is negative or not finite; nothing is modified then.
  void step(std::span<float> params, std::span<const float> grads, OptimizerState& state,
            int64_t step, float lr) const;

  // The same update for a sub-range of a larger state: params[i] uses state
  // element `state_offset + i` of every slot. Lets one state cover several
  // tensors (or a whole flat shard) while each is updated on its own; the
  // result is bit-identical to updating all of them in one call. Throws
  // tessera::Error (invalid argument) like step() above, and when
  // [state_offset, state_offset + params.size()) is not inside the state
  // (rules without state accept any offset); nothing is modified then.
  void step(std::span<float> params, std::span<const float> grads, OptimizerState& state,
            size_t state_offset, int64_t step, float lr) const;

 private:
  // Checks everything but the state's length.
  void check_step(std::span<float> params, std::span<const float> grads,
                  const OptimizerState& state, int64_t step, float lr) const;
  // The update once the arguments are checked: params[i] and grads[i] with
  // state element `state_offset + i`.
  void update(std::span<float> params, std::span<const float> grads, OptimizerState& state,
              size_t state_offset, int64_t step, float lr) const;
};

// The rule called `name` (sgd | momentum | adam | adamw) with `params`.
// Throws tessera::Error (invalid argument) for an unknown name, listing the
// valid ones, or for out-of-range hyper-parameters (momentum or betas outside
// [0, 1), eps <= 0, weight_decay < 0, nesterov without momentum or with
// dampening), naming the parameter.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const OptimizerParams& params);

// The rule selected by the [optimizer] section of the configuration.
// Same failures as above.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSection& section);

// Names accepted by make_optimizer, in a stable order.
const std::vector<std::string>& optimizer_names();

}  // namespace tessera

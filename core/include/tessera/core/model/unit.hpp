// The unit interface: one piece of a model (embedding, block, head) that
// declares its parameter tensors and runs forward and backward on parameter
// and gradient buffers the caller owns.
//
// A unit never owns parameters. The caller (a strategy, or the reference
// trainer) allocates one flat f32 buffer per declared parameter and hands the
// unit an array of pointers in declaration order; it may gather them just
// before the unit runs and free them after. Activations a unit needs for its
// backward pass, and its output buffers, live in a UnitContext the caller
// creates per micro-batch; several may be alive at once (pipeline schedules).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/data/batch.hpp"

namespace tessera::model {

// How a parameter may later be split for tensor parallelism, in terms of its
// storage: `column` splits the last dimension (for a weight [in, out] used as
// x·W that is the output features), `row` splits the first dimension (for
// [in, out] the input features; for a [vocab, d] table the vocabulary). A 1-D
// tensor marked `column` follows the column split of its layer's weight.
enum class SplitHint { none, column, row };

// Name of a split hint ("none", "column", "row").
const char* split_hint_name(SplitHint hint) noexcept;

// One declared parameter tensor. `tied_to` is empty for a parameter the unit
// owns; otherwise it names another unit's parameter as "<unit>.<param>" (same
// shape) whose buffer the caller must pass in this slot, with that
// parameter's gradient buffer as the gradient. Gradients accumulate, so both
// uses add up in the one gradient. A tied slot is neither allocated nor
// initialised on its own.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  SplitHint split = SplitHint::none;
  std::string tied_to;

  // Number of elements (product of the shape).
  [[nodiscard]] int64_t numel() const noexcept;
};

// A read-only row-major f32 matrix [rows, cols] owned by someone else.
struct ConstView {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  [[nodiscard]] bool empty() const noexcept { return data == nullptr; }
};

// Everything a unit's forward pass reads besides its parameters.
//  * batch: the micro-batch. The first unit reads its tokens (sequence
//    models) or inputs (classification); the last unit reads its targets.
//  * x: the previous unit's output (empty for the first unit).
//  * loss_scale: the last unit returns sum-of-per-example-losses ×
//    loss_scale; the caller passes 1/global_examples (or 1/global_tokens) so
//    gradients summed over micro-batches and ranks give the global mean.
struct UnitInput {
  const Batch* batch = nullptr;
  ConstView x;
  float loss_scale = 1.0f;
};

// Per-micro-batch state of one unit: saved activations and output buffers.
// Outputs returned by forward/backward point into it and stay valid until
// the next forward/backward on the same context or its destruction.
class UnitContext {
 public:
  virtual ~UnitContext() = default;
  // Bytes of memory the context holds (allocated capacity), for accounting.
  [[nodiscard]] virtual std::size_t bytes() const noexcept = 0;
};

// One unit of a model. Units are immutable after construction and may be
// used from several threads at once with distinct contexts.
class Unit {
 public:
  Unit(const Unit&) = delete;
  Unit& operator=(const Unit&) = delete;
  virtual ~Unit() = default;

  // Name unique within its model ("embed", "block3", "head", "layer0").
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  // Parameter tensors in declaration order.
  [[nodiscard]] std::span<const ParamSpec> params() const noexcept { return specs_; }
  // Whether this unit consumes the batch's tokens/inputs (the first unit).
  [[nodiscard]] bool is_first() const noexcept { return first_; }
  // Whether this unit is the head that takes targets and returns the loss.
  [[nodiscard]] bool is_last() const noexcept { return last_; }

  // Writes initial values into every non-tied parameter: weights normal(0,
  // 0.02), biases zero, LayerNorm gains one. A pure function of `seed`, the
  // unit's name and each parameter's name (same seed, same bits). `params`
  // holds one pointer per declared parameter; throws tessera::Error (invalid
  // argument) when the count is wrong.
  void init(std::span<float* const> params, uint64_t seed) const;

  // A fresh context for one micro-batch.
  [[nodiscard]] virtual std::unique_ptr<UnitContext> make_context() const = 0;

  // Forward pass. Returns the output activations [rows, width] (for the last
  // unit a 1×1 view holding the scaled loss). Saves what backward needs in
  // `ctx`. Throws tessera::Error (invalid argument) naming the unit when the
  // parameter count, the input shape, a token id or a target is wrong.
  virtual ConstView forward(UnitContext& ctx, std::span<const float* const> params,
                            const UnitInput& input) const = 0;

  // Backward pass for the last forward on `ctx`: ADDS this micro-batch's
  // parameter gradients into `grads` (declaration order) and returns the
  // gradient of the input activations (empty for the first unit, whose input
  // is data). `grad_output` has the output's shape; for the last unit it is
  // either empty (gradient 1) or 1×1 holding d(objective)/d(loss). Throws
  // tessera::Error (invalid argument) when no forward ran on `ctx` or shapes
  // disagree.
  virtual ConstView backward(UnitContext& ctx, std::span<const float* const> params,
                             std::span<float* const> grads, ConstView grad_output) const = 0;

 protected:
  // A derived unit fills `specs_` in its constructor.
  Unit(std::string name, bool first, bool last)
      : name_(std::move(name)), first_(first), last_(last) {}

  std::string name_;
  std::vector<ParamSpec> specs_;

 private:
  bool first_;
  bool last_;
};

}  // namespace tessera::model

// Dynamic loss scaling for f16 training (run.precision = "f16"): the loss,
// and so every gradient, is multiplied by a scale S large enough that small
// gradients survive f16's narrow range; a step whose scaled gradients
// overflow is skipped (the strategy finds it, tessera_step_args.grad_scale)
// and S halves; after `window` steps in a row without one, S doubles.
#pragma once

#include <cstdint>

namespace tessera::train {

class LossScaler {
 public:
  // What update() did to the scale.
  enum class Change { kept, lowered, raised };

  // Throws tessera::Error (invalid argument) when `initial` < 1 or not
  // finite, or `window` < 1.
  LossScaler(double initial, int64_t window);

  [[nodiscard]] double scale() const noexcept { return scale_; }
  // Steps in a row without an overflow since the scale last changed.
  [[nodiscard]] int64_t clean_steps() const noexcept { return clean_; }

  // After a step: `overflowed` halves the scale and restarts the count;
  // otherwise the count grows and reaching `window` doubles the scale.
  // Throws tessera::Error (invalid argument) when an overflow would take
  // the scale below kMinScale: the gradients overflow f16 whatever the
  // scale, and the run cannot go on in f16.
  Change update(bool overflowed);

  // The smallest scale tried, 2^-24 (f16's smallest subnormal).
  static constexpr double kMinScale = 1.0 / 16777216.0;
  // The largest: doubling stops there (f32's gradients would overflow).
  static constexpr double kMaxScale = 16777216.0 * 16777216.0;

 private:
  double scale_;
  int64_t window_;
  int64_t clean_ = 0;
};

}  // namespace tessera::train

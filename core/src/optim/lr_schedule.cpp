// Linear warm-up followed by cosine decay.
#include "tessera/core/optim/lr_schedule.hpp"

#include <cmath>
#include <numbers>

#include "tessera/sdk/error.hpp"

namespace tessera {

LrSchedule::LrSchedule(double base_lr, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : base_lr_(base_lr), min_lr_(min_lr), warmup_steps_(warmup_steps), total_steps_(total_steps) {
  TESSERA_CHECK(std::isfinite(base_lr) && base_lr > 0.0, TESSERA_ERR_INVALID_ARGUMENT,
                "learning-rate schedule: base lr ", base_lr, " must be > 0");
  TESSERA_CHECK(std::isfinite(min_lr) && min_lr >= 0.0 && min_lr <= base_lr,
                TESSERA_ERR_INVALID_ARGUMENT, "learning-rate schedule: min lr ", min_lr,
                " must be in [0, ", base_lr, "]");
  TESSERA_CHECK(warmup_steps >= 0, TESSERA_ERR_INVALID_ARGUMENT,
                "learning-rate schedule: warmup_steps ", warmup_steps, " must be >= 0");
  TESSERA_CHECK(total_steps >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                "learning-rate schedule: total steps ", total_steps, " must be >= 1");
  TESSERA_CHECK(warmup_steps <= total_steps, TESSERA_ERR_INVALID_ARGUMENT,
                "learning-rate schedule: warmup_steps ", warmup_steps, " exceeds the total steps ",
                total_steps);
}

float LrSchedule::lr(int64_t step) const {
  TESSERA_CHECK(step >= 1, TESSERA_ERR_INVALID_ARGUMENT, "learning-rate schedule: step ", step,
                " is invalid (the first update is step 1)");
  if (step <= warmup_steps_) {
    return static_cast<float>(base_lr_ * static_cast<double>(step) /
                              static_cast<double>(warmup_steps_));
  }
  if (step >= total_steps_) {
    return static_cast<float>(min_lr_);
  }
  const double progress =
      static_cast<double>(step - warmup_steps_) / static_cast<double>(total_steps_ - warmup_steps_);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return static_cast<float>(min_lr_ + (base_lr_ - min_lr_) * cosine);
}

LrSchedule make_lr_schedule(const OptimizerSection& optimizer, const RunSection& run) {
  return LrSchedule(optimizer.lr, optimizer.warmup_steps, run.steps, 0.0);
}

}  // namespace tessera

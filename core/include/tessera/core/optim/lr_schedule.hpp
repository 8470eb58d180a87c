// Learning-rate schedule: linear warm-up, then cosine decay.
#pragma once

#include <cstdint>

#include "tessera/core/config.hpp"

namespace tessera {

// lr(step) for updates numbered from 1 (the same numbering as
// Optimizer::step), the first matching rule:
//   step <= warmup_steps:  base_lr * step / warmup_steps
//   step >= total_steps:   min_lr
//   otherwise:             min_lr + (base_lr - min_lr) * (1 + cos(pi * p)) / 2
//                          with p = (step - warmup_steps) / (total_steps - warmup_steps)
// The warm-up reaches base_lr exactly at step warmup_steps and the decay
// reaches min_lr exactly at total_steps; steps past the end stay at min_lr.
class LrSchedule {
 public:
  // Throws tessera::Error (invalid argument) naming the value when base_lr
  // is not > 0, min_lr is not in [0, base_lr], warmup_steps < 0,
  // total_steps < 1 or warmup_steps > total_steps.
  LrSchedule(double base_lr, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);

  // The rate for update `step`. Throws tessera::Error (invalid argument)
  // when step < 1.
  [[nodiscard]] float lr(int64_t step) const;

  [[nodiscard]] double base_lr() const noexcept { return base_lr_; }
  [[nodiscard]] double min_lr() const noexcept { return min_lr_; }
  [[nodiscard]] int64_t warmup_steps() const noexcept { return warmup_steps_; }
  [[nodiscard]] int64_t total_steps() const noexcept { return total_steps_; }

 private:
  double base_lr_;
  double min_lr_;
  int64_t warmup_steps_;
  int64_t total_steps_;
};

// The schedule of a run: optimizer.lr, optimizer.warmup_steps, decay to 0
// at run.steps. Same failures as the constructor.
LrSchedule make_lr_schedule(const OptimizerSection& optimizer, const RunSection& run);

}  // namespace tessera

// The concrete update rules behind make_optimizer. Each follows PyTorch's
// definition of the rule of the same name, computed in f32 per element.
#pragma once

#include <string>
#include <vector>

#include "tessera/core/optim/optimizer.hpp"

namespace tessera {

// Plain SGD: g' = g + wd*p; p -= lr * g'. No state.
class SgdOptimizer final : public Optimizer {
 public:
  explicit SgdOptimizer(const OptimizerParams& params);
  [[nodiscard]] const std::string& name() const noexcept override { return name_; }
  [[nodiscard]] size_t slots() const noexcept override { return 0; }
  [[nodiscard]] std::vector<std::string> slot_names() const override { return {}; }
  [[nodiscard]] optim::ElementwiseStep elementwise_step(int64_t step, float lr) const override;

 private:
  std::string name_ = "sgd";
  float weight_decay_;
};

// SGD with momentum: g' = g + wd*p; on step 1 b = g', afterwards
// b = mu*b + (1 - dampening)*g'; the update direction is g' + mu*b with
// nesterov, b otherwise; p -= lr * direction. One slot: "momentum_buffer".
// Throws tessera::Error (invalid argument) for momentum outside [0, 1),
// dampening outside [0, 1], a negative weight decay, or nesterov with zero
// momentum or non-zero dampening.
class MomentumOptimizer final : public Optimizer {
 public:
  explicit MomentumOptimizer(const OptimizerParams& params);
  [[nodiscard]] const std::string& name() const noexcept override { return name_; }
  [[nodiscard]] size_t slots() const noexcept override { return 1; }
  [[nodiscard]] std::vector<std::string> slot_names() const override { return {"momentum_buffer"}; }
  [[nodiscard]] optim::ElementwiseStep elementwise_step(int64_t step, float lr) const override;

 private:
  std::string name_ = "momentum";
  float weight_decay_;
  float momentum_;
  float keep_;  // 1 - dampening, rounded once from double
  bool nesterov_;
};

// Adam (decoupled = false) and AdamW (decoupled = true), with bias
// correction. At step t:
//   adam:  g' = g + wd*p          adamw: p *= 1 - lr*wd, g' = g
//   m = b1*m + (1-b1)*g'          v = b2*v + (1-b2)*g'^2
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Two slots: "exp_avg" (m) and "exp_avg_sq" (v). Throws tessera::Error
// (invalid argument) for betas outside [0, 1), eps <= 0 or a negative
// weight decay.
class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(const OptimizerParams& params, bool decoupled);
  [[nodiscard]] const std::string& name() const noexcept override { return name_; }
  [[nodiscard]] size_t slots() const noexcept override { return 2; }
  [[nodiscard]] std::vector<std::string> slot_names() const override {
    return {"exp_avg", "exp_avg_sq"};
  }
  [[nodiscard]] optim::ElementwiseStep elementwise_step(int64_t step, float lr) const override;

 private:
  std::string name_;
  bool decoupled_;
  float weight_decay_;
  double beta1_;  // bias corrections use the exact (double) betas
  double beta2_;
  float beta1_f_;
  float beta2_f_;
  float one_minus_beta1_;  // 1 - beta rounded once from double, as PyTorch does
  float one_minus_beta2_;
  float eps_;
};

}  // namespace tessera

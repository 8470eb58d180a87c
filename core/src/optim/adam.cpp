// Adam and AdamW with bias correction (PyTorch semantics).
#include <cmath>

#include "tessera/core/optim/rules.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {

AdamOptimizer::AdamOptimizer(const OptimizerParams& params, bool decoupled)
    : name_(decoupled ? "adamw" : "adam"),
      decoupled_(decoupled),
      weight_decay_(static_cast<float>(params.weight_decay)),
      beta1_(params.beta1),
      beta2_(params.beta2),
      beta1_f_(static_cast<float>(params.beta1)),
      beta2_f_(static_cast<float>(params.beta2)),
      one_minus_beta1_(static_cast<float>(1.0 - params.beta1)),
      one_minus_beta2_(static_cast<float>(1.0 - params.beta2)),
      eps_(static_cast<float>(params.eps)) {
  TESSERA_CHECK(std::isfinite(params.weight_decay) && params.weight_decay >= 0.0,
                TESSERA_ERR_INVALID_ARGUMENT, "optimizer '", name_, "': weight_decay ",
                params.weight_decay, " must be >= 0");
  TESSERA_CHECK(params.beta1 >= 0.0 && params.beta1 < 1.0, TESSERA_ERR_INVALID_ARGUMENT,
                "optimizer '", name_, "': beta1 ", params.beta1, " must be in [0, 1)");
  TESSERA_CHECK(params.beta2 >= 0.0 && params.beta2 < 1.0, TESSERA_ERR_INVALID_ARGUMENT,
                "optimizer '", name_, "': beta2 ", params.beta2, " must be in [0, 1)");
  TESSERA_CHECK(std::isfinite(params.eps) && params.eps > 0.0, TESSERA_ERR_INVALID_ARGUMENT,
                "optimizer '", name_, "': eps ", params.eps, " must be > 0");
}

optim::ElementwiseStep AdamOptimizer::elementwise_step(int64_t step, float lr) const {
  // Step-dependent scalars are computed once, in double, then rounded, so
  // every element (and every shard) sees exactly the same values.
  const double t = static_cast<double>(step);
  const double bias1 = 1.0 - std::pow(beta1_, t);
  const double bias2 = 1.0 - std::pow(beta2_, t);
  optim::ElementwiseStep s;
  s.rule = optim::Rule::adam;
  s.lr = lr;
  s.step_size = static_cast<float>(static_cast<double>(lr) / bias1);
  s.bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  s.decay = decoupled_ ? 1.0F - lr * weight_decay_ : 1.0F;
  s.l2 = decoupled_ ? 0.0F : weight_decay_;
  s.beta1 = beta1_f_;
  s.beta2 = beta2_f_;
  s.one_minus_beta1 = one_minus_beta1_;
  s.one_minus_beta2 = one_minus_beta2_;
  s.eps = eps_;
  return s;
}

}  // namespace tessera

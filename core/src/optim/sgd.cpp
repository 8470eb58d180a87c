// Plain SGD and SGD with momentum (PyTorch semantics).
#include <cmath>

#include "tessera/core/optim/rules.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {

namespace {

void check_weight_decay(const char* rule, double weight_decay) {
  TESSERA_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0, TESSERA_ERR_INVALID_ARGUMENT,
                "optimizer '", rule, "': weight_decay ", weight_decay, " must be >= 0");
}

}  // namespace

SgdOptimizer::SgdOptimizer(const OptimizerParams& params)
    : weight_decay_(static_cast<float>(params.weight_decay)) {
  check_weight_decay("sgd", params.weight_decay);
}

optim::ElementwiseStep SgdOptimizer::elementwise_step(int64_t /*step*/, float lr) const {
  optim::ElementwiseStep s;
  s.rule = optim::Rule::sgd;
  s.lr = lr;
  s.weight_decay = weight_decay_;
  return s;
}

MomentumOptimizer::MomentumOptimizer(const OptimizerParams& params)
    : weight_decay_(static_cast<float>(params.weight_decay)),
      momentum_(static_cast<float>(params.momentum)),
      keep_(static_cast<float>(1.0 - params.dampening)),
      nesterov_(params.nesterov) {
  check_weight_decay("momentum", params.weight_decay);
  TESSERA_CHECK(params.momentum >= 0.0 && params.momentum < 1.0, TESSERA_ERR_INVALID_ARGUMENT,
                "optimizer 'momentum': momentum ", params.momentum, " must be in [0, 1)");
  TESSERA_CHECK(params.dampening >= 0.0 && params.dampening <= 1.0, TESSERA_ERR_INVALID_ARGUMENT,
                "optimizer 'momentum': dampening ", params.dampening, " must be in [0, 1]");
  TESSERA_CHECK(!params.nesterov || (params.momentum > 0.0 && params.dampening == 0.0),
                TESSERA_ERR_INVALID_ARGUMENT,
                "optimizer 'momentum': nesterov needs momentum > 0 and dampening 0 (got "
                "momentum ",
                params.momentum, ", dampening ", params.dampening, ")");
}

optim::ElementwiseStep MomentumOptimizer::elementwise_step(int64_t step, float lr) const {
  optim::ElementwiseStep s;
  s.rule = optim::Rule::momentum;
  s.lr = lr;
  s.weight_decay = weight_decay_;
  s.momentum = momentum_;
  s.keep = keep_;
  s.nesterov = nesterov_;
  s.first = step == 1;
  return s;
}

}  // namespace tessera

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

void SgdOptimizer::update(std::span<float> params, std::span<const float> grads,
                          OptimizerState& /*state*/, size_t /*state_offset*/, int64_t /*step*/,
                          float lr) const {
  const float wd = weight_decay_;
  float* p = params.data();
  const float* g = grads.data();
  const size_t n = params.size();
  for (size_t i = 0; i < n; ++i) {
    const float d = g[i] + wd * p[i];
    p[i] -= lr * d;
  }
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

void MomentumOptimizer::update(std::span<float> params, std::span<const float> grads,
                               OptimizerState& state, size_t state_offset, int64_t step,
                               float lr) const {
  const float wd = weight_decay_;
  const float mu = momentum_;
  const float keep = keep_;
  float* p = params.data();
  const float* g = grads.data();
  float* b = state.slot(0).data() + state_offset;
  const size_t n = params.size();
  const bool first = step == 1;
  for (size_t i = 0; i < n; ++i) {
    const float d = g[i] + wd * p[i];
    const float buf = first ? d : mu * b[i] + keep * d;
    b[i] = buf;
    const float dir = nesterov_ ? d + mu * buf : buf;
    p[i] -= lr * dir;
  }
}

}  // namespace tessera

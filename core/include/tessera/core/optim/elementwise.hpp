// The optimizers' update of one element (optimizer.hpp), written once for
// both places it runs: the CPU loop (src/optim/optimizer.cpp) and the CUDA
// kernel (src/device/cuda_kernels.cu). Both are compiled without FMA
// contraction, and the square root and division are IEEE-rounded on both,
// so an element updated on a GPU is bit-identical to one updated on the CPU.
// C++17, so that nvcc compiles it too.
#pragma once

#include <math.h>  // NOLINT(modernize-deprecated-headers): sqrtf for host and device alike

#include <cstdint>

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif

namespace tessera::optim {

// The update rules: sgd; momentum (heavy ball or Nesterov); adam and adamw
// (one rule: adamw decays the parameter, adam adds L2 to the gradient).
enum class Rule : int32_t { sgd = 0, momentum = 1, adam = 2 };

// The scalars of one update call, computed once per call (the step-dependent
// ones in double, then rounded) so that every element and every shard sees
// the same values.
struct ElementwiseStep {
  Rule rule = Rule::sgd;
  float lr = 0.0F;
  // sgd and momentum: L2 added to the gradient.
  float weight_decay = 0.0F;
  // momentum
  float momentum = 0.0F;
  float keep = 1.0F;  // 1 - dampening
  bool nesterov = false;
  bool first = false;  // step 1: the buffer starts as the gradient
  // adam
  float decay = 1.0F;  // adamw: 1 - lr * weight_decay; adam: 1
  float l2 = 0.0F;     // adam: weight_decay; adamw: 0
  float beta1 = 0.0F;
  float beta2 = 0.0F;
  float one_minus_beta1 = 0.0F;
  float one_minus_beta2 = 0.0F;
  float eps = 0.0F;
  float step_size = 0.0F;   // lr / (1 - beta1^t)
  float bias2_sqrt = 1.0F;  // sqrt(1 - beta2^t)
};

// Updates element i: p[i] from g[i] and the rule's state (s0: momentum
// buffer or Adam's first moment, s1: Adam's second moment; unused slots
// may be null).
template <Rule R>
TESSERA_HOST_DEVICE inline void update_element(const ElementwiseStep& s, float* p, const float* g,
                                               float* s0, float* s1, uint64_t i) {
  if constexpr (R == Rule::sgd) {
    const float d = g[i] + s.weight_decay * p[i];
    p[i] -= s.lr * d;
  } else if constexpr (R == Rule::momentum) {
    const float d = g[i] + s.weight_decay * p[i];
    const float buf = s.first ? d : s.momentum * s0[i] + s.keep * d;
    s0[i] = buf;
    const float dir = s.nesterov ? d + s.momentum * buf : buf;
    p[i] -= s.lr * dir;
  } else {
    const float pi = p[i] * s.decay;
    const float d = g[i] + s.l2 * pi;
    const float mi = s.beta1 * s0[i] + s.one_minus_beta1 * d;
    const float vi = s.beta2 * s1[i] + s.one_minus_beta2 * (d * d);
    s0[i] = mi;
    s1[i] = vi;
    const float denom = sqrtf(vi) / s.bias2_sqrt + s.eps;
    p[i] = pi - s.step_size * (mi / denom);
  }
}

}  // namespace tessera::optim

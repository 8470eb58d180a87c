// resmlp_gradcheck: checks resmlp's units without a Tessera host. It builds
// a small resmlp, feeds it a micro-batch made here (a BatchView over local
// vectors) and compares every parameter's gradient from backward with
// central differences of the loss from forward, through the whole chain of
// units (so the input gradients of the blocks and the head are checked too).
// It also checks what the unit contract asks beyond the gradient: init is a
// pure function of (seed, unit, parameter), the loss and gradients scale
// with loss_scale and with the head's output gradient, backward adds into
// the gradient buffers, and bad batches are refused naming the unit.
//
// Exit status 0 when every check passes, 1 otherwise (each failure printed).
//
// Central differences (step 1e-2; the loss is a float, so a much smaller
// step drowns in its rounding) are wrong where a perturbation moves a ReLU
// input across 0; an element that fails at the first step is checked again
// at a step 8 times smaller, where such a crossing is far less likely. A
// wrong derivative fails at both steps; retried elements are printed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <tessera/sdk/error.hpp>
#include <tessera/sdk/model.hpp>
#include <tessera/sdk/rng.hpp>

#include "resmlp.hpp"

namespace {

namespace sdk = tessera::sdk;
using sdk::model::BatchView;
using sdk::model::ConstView;
using sdk::model::UnitInput;

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAIL: %s\n", what.c_str());
  }
}

// A model's units with parameter and gradient buffers, one context each.
struct Net {
  std::vector<std::unique_ptr<sdk::model::Unit>> units;
  std::vector<std::vector<std::vector<float>>> params;  // [unit][param][element]
  std::vector<std::vector<std::vector<float>>> grads;
  std::vector<std::unique_ptr<sdk::model::UnitContext>> contexts;

  explicit Net(const resmlp::Config& config) : units(resmlp::build_units(config)) {
    for (const auto& u : units) {
      std::vector<std::vector<float>> p;
      for (const auto& spec : u->params()) p.emplace_back(static_cast<std::size_t>(spec.numel()));
      params.push_back(p);
      grads.push_back(p);
      contexts.push_back(u->make_context());
    }
  }

  void init(uint64_t seed) {
    for (std::size_t u = 0; u < units.size(); ++u) {
      std::vector<float*> ptrs;
      for (auto& p : params[u]) ptrs.push_back(p.data());
      units[u]->init(ptrs, seed);
    }
  }

  static std::vector<const float*> views(const std::vector<std::vector<float>>& buffers) {
    std::vector<const float*> out;
    for (const auto& b : buffers) out.push_back(b.data());
    return out;
  }

  // The loss of the whole chain (Σ per-example loss × loss_scale).
  double loss(const BatchView& batch, float loss_scale) {
    UnitInput input;
    input.batch = &batch;
    input.loss_scale = loss_scale;
    ConstView x;
    for (std::size_t u = 0; u < units.size(); ++u) {
      input.x = x;
      x = units[u]->forward(*contexts[u], views(params[u]), input);
    }
    return x.data[0];
  }

  // Forward and backward; the gradients are added into `grads` (zeroed
  // first unless `accumulate`). `head_grad` < 0: no output gradient for the
  // head (gradient 1); else a 1×1 output gradient holding it.
  double gradient(const BatchView& batch, float loss_scale, bool accumulate = false,
                  float head_grad = -1.0f) {
    if (!accumulate) {
      for (auto& unit_grads : grads) {
        for (auto& g : unit_grads) std::fill(g.begin(), g.end(), 0.0f);
      }
    }
    const double l = loss(batch, loss_scale);
    ConstView dy;
    if (head_grad >= 0.0f) dy = {&head_grad, 1, 1};
    for (std::size_t u = units.size(); u-- > 0;) {
      std::vector<float*> g;
      for (auto& b : grads[u]) g.push_back(b.data());
      dy = units[u]->backward(*contexts[u], views(params[u]), g, dy);
    }
    check(dy.empty(), "the first unit returns no input gradient");
    return l;
  }

  std::string param_name(std::size_t u, std::size_t p) const {
    return units[u]->name() + "." + units[u]->params()[p].name;
  }
};

bool same_bits(const Net& a, const Net& b) {
  for (std::size_t u = 0; u < a.params.size(); ++u) {
    for (std::size_t p = 0; p < a.params[u].size(); ++p) {
      if (std::memcmp(a.params[u][p].data(), b.params[u][p].data(),
                      a.params[u][p].size() * sizeof(float)) != 0) {
        return false;
      }
    }
  }
  return true;
}

// Largest |a - b| / max(|b|, floor) over all gradients of two nets.
double gradient_difference(const Net& a, const Net& b, float factor) {
  double worst = 0.0;
  for (std::size_t u = 0; u < a.grads.size(); ++u) {
    for (std::size_t p = 0; p < a.grads[u].size(); ++p) {
      for (std::size_t i = 0; i < a.grads[u][p].size(); ++i) {
        const double x = a.grads[u][p][i];
        const double y = static_cast<double>(factor) * b.grads[u][p][i];
        worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), 1e-3));
      }
    }
  }
  return worst;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const tessera::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

int main() {
  // Small but with every kind of unit: 3 blocks of two hidden widths.
  resmlp::Config config;
  config.input = 5;
  config.width = 6;
  config.hidden = {7, 7, 4};
  config.classes = 3;
  config.residual_init = 0.5;
  constexpr int64_t kExamples = 6;
  constexpr uint64_t kSeed = 7;

  // The micro-batch: Gaussian features and arbitrary class targets.
  std::vector<float> inputs(static_cast<std::size_t>(kExamples * config.input));
  std::vector<int32_t> targets(static_cast<std::size_t>(kExamples));
  tessera::KeyedRng data_rng(0xDA7AULL);
  for (float& v : inputs) v = static_cast<float>(data_rng.normal());
  for (int32_t& t : targets) t = static_cast<int32_t>(data_rng.below(config.classes));
  BatchView batch;
  batch.size = kExamples;
  batch.features = config.input;
  batch.inputs = inputs;
  batch.targets = targets;

  // 1. init: a pure function of (seed, unit, parameter).
  Net net(config), again(config), other(config);
  net.init(kSeed);
  again.init(kSeed);
  other.init(kSeed + 1);
  check(same_bits(net, again), "init with the same seed gives different parameters");
  check(!same_bits(net, other), "init with another seed gives the same parameters");
  check(net.params[1][0] != net.params[2][0],
        "block0.w1 and block1.w1 (same shape) start equal: the unit name is not in the key");
  check(std::all_of(net.params[1][1].begin(), net.params[1][1].end(),
                    [](float v) { return v == 0.0f; }),
        "block0.b1 does not start at 0");

  // Move every parameter off its initial value so that biases are not 0 and
  // the check does not depend on the initialisation's structure.
  tessera::KeyedRng jitter(0x5EEDULL);
  for (auto& unit_params : net.params) {
    for (auto& p : unit_params) {
      for (float& v : p) v += static_cast<float>(0.1 * jitter.normal());
    }
  }

  // 2. Every parameter's gradient against central differences of the loss.
  constexpr float kScale = 1.0f;
  constexpr double kStep = 1e-2;
  constexpr double kTolerance = 1e-2;
  net.gradient(batch, kScale);
  const double loss = net.loss(batch, kScale);
  std::printf("resmlp gradcheck: %zu units, %lld examples, loss %.6f\n", net.units.size(),
              static_cast<long long>(kExamples), loss);
  const auto central = [&](float& v, double step) {
    const float saved = v;
    v = static_cast<float>(saved + step);
    const double up = net.loss(batch, kScale);
    v = static_cast<float>(saved - step);
    const double down = net.loss(batch, kScale);
    v = saved;
    return (up - down) / (2.0 * step);
  };
  double worst = 0.0;
  int checked = 0;
  int retried = 0;
  for (std::size_t u = 0; u < net.units.size(); ++u) {
    for (std::size_t p = 0; p < net.params[u].size(); ++p) {
      std::vector<float>& values = net.params[u][p];
      const std::vector<float>& analytic = net.grads[u][p];
      double largest = 0.0;
      for (const float g : analytic) largest = std::max(largest, static_cast<double>(std::abs(g)));
      // Elements whose gradient is under 1% of the tensor's largest are
      // compared on that scale (their differences are mostly rounding).
      const double floor = std::max(1e-2 * largest, 1e-6);
      const auto error = [&](double a, double n) {
        return std::abs(a - n) / std::max({std::abs(a), std::abs(n), floor});
      };
      double tensor_worst = 0.0;
      for (std::size_t i = 0; i < values.size(); ++i) {
        const double a = analytic[i];
        double e = error(a, central(values[i], kStep));
        if (e > kTolerance) {
          ++retried;
          const double first = e;
          e = error(a, central(values[i], kStep / 8.0));
          std::printf("  %s[%zu]: relative error %.2e at step %.0e, %.2e at step %.2e\n",
                      net.param_name(u, p).c_str(), i, first, kStep, e, kStep / 8.0);
        }
        ++checked;
        tensor_worst = std::max(tensor_worst, e);
        if (e > kTolerance) {
          check(false, net.param_name(u, p) + "[" + std::to_string(i) + "]: backward " +
                           std::to_string(a) + ", central difference " +
                           std::to_string(central(values[i], kStep)));
        }
      }
      std::printf("  %-10s %4zu elements, largest |grad| %.4f, largest relative error %.2e\n",
                  net.param_name(u, p).c_str(), values.size(), largest, tensor_worst);
      worst = std::max(worst, tensor_worst);
    }
  }
  std::printf("gradient: %d elements, largest relative error %.2e (tolerance %.0e), %d retried\n",
              checked, worst, kTolerance, retried);

  // 3. loss_scale scales the loss and the gradients; the head's output
  // gradient scales the gradients; backward adds into the buffers.
  Net scaled(config);
  scaled.params = net.params;
  const double loss_quarter = scaled.gradient(batch, 0.25f);
  check(std::abs(loss_quarter - 0.25 * loss) <= 1e-6 * loss,
        "loss_scale 0.25 gives loss " + std::to_string(loss_quarter) + ", expected " +
            std::to_string(0.25 * loss));
  const double scale_error = gradient_difference(scaled, net, 0.25f);
  check(scale_error <= 1e-5, "gradients at loss_scale 0.25 are not a quarter of those at 1 (" +
                                 std::to_string(scale_error) + ")");
  scaled.gradient(batch, kScale, false, 2.0f);
  const double head_error = gradient_difference(scaled, net, 2.0f);
  check(head_error <= 1e-5, "an output gradient of 2 does not double the gradients (" +
                                std::to_string(head_error) + ")");
  scaled.gradient(batch, kScale);
  scaled.gradient(batch, kScale, true);
  const double add_error = gradient_difference(scaled, net, 2.0f);
  check(add_error <= 1e-5,
        "two backward passes without zeroing do not add up (" + std::to_string(add_error) + ")");
  std::printf("scaling: loss_scale %.1e, output gradient %.1e, accumulation %.1e\n", scale_error,
              head_error, add_error);

  // 4. Bad batches are refused naming the unit.
  BatchView narrow = batch;
  narrow.features = config.input - 1;
  const std::string narrow_error = error_of([&] { net.loss(narrow, kScale); });
  check(narrow_error.find("unit 'proj'") != std::string::npos,
        "a batch of the wrong width is not refused by 'proj': '" + narrow_error + "'");
  std::vector<int32_t> bad_targets = targets;
  bad_targets[2] = static_cast<int32_t>(config.classes);
  BatchView bad = batch;
  bad.targets = bad_targets;
  const std::string target_error = error_of([&] { net.loss(bad, kScale); });
  check(target_error.find("unit 'head'") != std::string::npos &&
            target_error.find("target 3 of row 2") != std::string::npos,
        "a target out of range is not refused by 'head': '" + target_error + "'");
  // The failed forward leaves nothing for backward to use.
  const std::string stale_error = error_of([&] {
    std::vector<float*> g;
    for (auto& b : net.grads.back()) g.push_back(b.data());
    net.units.back()->backward(*net.contexts.back(), Net::views(net.params.back()), g, {});
  });
  check(stale_error.find("backward without a forward") != std::string::npos,
        "backward after a failed forward is not refused: '" + stale_error + "'");
  resmlp::Config wrong = config;
  wrong.classes = 1;
  const std::string config_error = error_of([&] { resmlp::build_units(wrong); });
  check(config_error == "key 'classes' must be >= 2, got 1",
        "classes = 1 is not refused as expected: '" + config_error + "'");

  if (failures > 0) {
    std::printf("resmlp gradcheck: %d check(s) FAILED\n", failures);
    return 1;
  }
  std::printf("resmlp gradcheck: all checks passed\n");
  return 0;
}

// make_optimizer: from a name and hyper-parameters, or from [optimizer].
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/optim/optimizer.hpp"
#include "tessera/core/optim/rules.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {"sgd", "momentum", "adam", "adamw"};
  return names;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const OptimizerParams& params) {
  if (name == "sgd") {
    return std::make_unique<SgdOptimizer>(params);
  }
  if (name == "momentum") {
    return std::make_unique<MomentumOptimizer>(params);
  }
  if (name == "adam") {
    return std::make_unique<AdamOptimizer>(params, /*decoupled=*/false);
  }
  if (name == "adamw") {
    return std::make_unique<AdamOptimizer>(params, /*decoupled=*/true);
  }
  std::string valid;
  for (const std::string& known : optimizer_names()) {
    valid += valid.empty() ? known : ", " + known;
  }
  throw Error(TESSERA_ERR_INVALID_ARGUMENT, "unknown optimizer '" + name + "'; valid: " + valid);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSection& section) {
  OptimizerParams params;
  params.weight_decay = section.weight_decay;
  params.momentum = section.momentum;
  params.beta1 = section.beta1;
  params.beta2 = section.beta2;
  params.eps = section.eps;
  return make_optimizer(section.name, params);
}

}  // namespace tessera

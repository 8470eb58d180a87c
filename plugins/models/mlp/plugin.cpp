// The `mlp` model plugin: its declared options and registration.
#include <memory>
#include <utility>
#include <vector>

#include "mlp.hpp"
#include "tessera/models/cuda_units.hpp"
#include "tessera/sdk/model.hpp"

namespace {

constexpr tessera_option_decl kMlpOptions[] = {
    {"input", TESSERA_OPT_INT, "32", "features per example"},
    {"hidden", TESSERA_OPT_INT_LIST, "[64]", "widths of the hidden layers, in order (may be [])"},
    {"classes", TESSERA_OPT_INT, "10", "number of classes (>= 2)"},
    {"activation", TESSERA_OPT_STRING, "\"relu\"", "activation of hidden layers: relu | gelu"},
};

std::unique_ptr<tessera::sdk::model::Model> make_mlp(const tessera::sdk::Host& host,
                                                     const tessera::sdk::Options& options) {
  const tessera::model::MlpConfig config = tessera::model::parse_mlp_config(options);
  std::vector<std::unique_ptr<tessera::model::Unit>> units =
      tessera::model::build_mlp_units(config);
  if (tessera::model::cuda::wants_cuda(host)) {
    units = tessera::model::cuda_mlp_units(tessera::model::cuda::load_units("mlp"), host.raw(),
                                           config, std::move(units));
  }
  return std::make_unique<tessera::sdk::model::Model>(
      "mlp", std::move(units),
      tessera::sdk::model::DataSpec::classification(config.input, config.classes));
}

}  // namespace

TESSERA_REGISTER_MODEL(make_mlp, "mlp", "1.0.0",
                       "dense layers (ReLU/GELU) and a softmax classifier over feature vectors",
                       kMlpOptions)

// The `resmlp` model plugin: its declared options, the factory that reads
// them, and the registration (the units are in resmlp.cpp).
#include <memory>
#include <utility>

#include <tessera/sdk/model.hpp>

#include "resmlp.hpp"

namespace {

namespace sdk = tessera::sdk;

// The keys of [model] besides `name` and `init`; the host checks names and
// types against these (an unknown key is an error listing them) and fills
// in the defaults.
constexpr tessera_option_decl kOptions[] = {
    {"input", TESSERA_OPT_INT, "16", "features per example (>= 1)"},
    {"width", TESSERA_OPT_INT, "32", "width of the residual stream (>= 1)"},
    {"hidden", TESSERA_OPT_INT_LIST, "[64, 64]",
     "hidden width of each residual block, one block per entry (may be [])"},
    {"classes", TESSERA_OPT_INT, "4", "number of classes (>= 2)"},
    {"residual_init", TESSERA_OPT_FLOAT, "0.5",
     "initial std of each block's W2 times sqrt(hidden width) (>= 0; 0: blocks start as identity)"},
};

std::unique_ptr<sdk::model::Model> make_resmlp(const sdk::Host& /*host*/,
                                               const sdk::Options& options) {
  resmlp::Config config;
  config.input = options.get_int("input");
  config.width = options.get_int("width");
  config.hidden = options.get_int_list("hidden");
  config.classes = options.get_int("classes");
  config.residual_init = options.get_float("residual_init");
  // build_units checks the ranges and throws naming the key; the host adds
  // where the [model] table came from.
  auto units = resmlp::build_units(config);
  return std::make_unique<sdk::model::Model>(
      "resmlp", std::move(units),
      sdk::model::DataSpec::classification(config.input, config.classes));
}

}  // namespace

TESSERA_REGISTER_MODEL(make_resmlp, "resmlp", "0.1.0",
                       "residual MLP classifier over feature vectors (out-of-tree example)",
                       kOptions)

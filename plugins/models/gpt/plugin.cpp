// The `gpt` model plugin: its declared options and registration.
#include <memory>
#include <utility>

#include "gpt.hpp"
#include "tessera/sdk/model.hpp"

namespace {

constexpr tessera_option_decl kGptOptions[] = {
    {"vocab", TESSERA_OPT_INT, "256", "vocabulary size: token ids are in [0, vocab) (>= 2)"},
    {"layers", TESSERA_OPT_INT, "2", "decoder blocks"},
    {"d_model", TESSERA_OPT_INT, "64", "width of the residual stream"},
    {"heads", TESSERA_OPT_INT, "4", "attention heads; must divide d_model"},
    {"seq_len", TESSERA_OPT_INT, "32", "tokens per example (context length)"},
    {"tied_head", TESSERA_OPT_BOOL, "true", "the output head reuses the token embedding"},
    {"mlp_ratio", TESSERA_OPT_INT, "4", "hidden width of each block's MLP, in units of d_model"},
};

std::unique_ptr<tessera::sdk::model::Model> make_gpt(const tessera::sdk::Host& /*host*/,
                                                     const tessera::sdk::Options& options) {
  const tessera::model::GptConfig config = tessera::model::parse_gpt_config(options);
  return std::make_unique<tessera::sdk::model::Model>(
      "gpt", tessera::model::build_gpt_units(config),
      tessera::sdk::model::DataSpec::sequences(config.seq_len, config.vocab));
}

}  // namespace

TESSERA_REGISTER_MODEL(make_gpt, "gpt", "1.0.0",
                       "decoder-only transformer (LayerNorm, GELU MLP, learned positions)",
                       kGptOptions)

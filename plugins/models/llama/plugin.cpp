// The `llama` model plugin: its declared options and registration.
#include <memory>
#include <utility>
#include <vector>

#include "llama.hpp"
#include "tessera/models/cuda_units.hpp"
#include "tessera/sdk/model.hpp"

namespace {

constexpr tessera_option_decl kLlamaOptions[] = {
    {"vocab", TESSERA_OPT_INT, "256", "vocabulary size: token ids are in [0, vocab) (>= 2)"},
    {"layers", TESSERA_OPT_INT, "2", "decoder blocks"},
    {"d_model", TESSERA_OPT_INT, "64", "width of the residual stream"},
    {"heads", TESSERA_OPT_INT, "4", "query heads; must divide d_model into an even head size"},
    {"kv_heads", TESSERA_OPT_INT, "0",
     "key/value heads (grouped-query attention); must divide heads; 0: as many as heads"},
    {"seq_len", TESSERA_OPT_INT, "32", "tokens per example (context length)"},
    {"ffn", TESSERA_OPT_INT, "0",
     "hidden width of the SwiGLU MLP; 0: 8*d_model/3 rounded up to a multiple of 8"},
    {"rope_theta", TESSERA_OPT_FLOAT, "10000.0", "base of the rotary position embedding angles"},
    {"norm_eps", TESSERA_OPT_FLOAT, "1e-5", "epsilon of RMSNorm"},
    {"kv_replicated", TESSERA_OPT_BOOL, "false",
     "tensor parallelism: every rank keeps all key/value heads (needed when the group size does "
     "not divide kv_heads) instead of kv_heads/tp of them"},
};

std::unique_ptr<tessera::sdk::model::Model> make_llama(const tessera::sdk::Host& host,
                                                       const tessera::sdk::Options& options) {
  const tessera::model::LlamaConfig config = tessera::model::parse_llama_config(options);
  if (config.kv_replicated) {
    host.info("kv_replicated: under tensor parallelism every rank keeps all ", config.kv_heads,
              " key/value heads (wk and wv whole, their gradients summed over the group)");
  }
  std::vector<std::unique_ptr<tessera::model::Unit>> units =
      tessera::model::build_llama_units(config);
  if (tessera::model::cuda::wants_cuda(host)) {
    units = tessera::model::cuda_llama_units(tessera::model::cuda::load_units("llama"), host.raw(),
                                             config, std::move(units));
  }
  return std::make_unique<tessera::sdk::model::Model>(
      "llama", std::move(units),
      tessera::sdk::model::DataSpec::sequences(config.seq_len, config.vocab));
}

}  // namespace

TESSERA_REGISTER_MODEL(make_llama, "llama", "1.0.0",
                       "decoder-only transformer as Llama: RMSNorm, rotary positions, SwiGLU, "
                       "grouped-query attention, untied head",
                       kLlamaOptions)

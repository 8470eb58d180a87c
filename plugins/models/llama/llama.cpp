// Configuration and assembly of the llama model (see llama.hpp).
#include "llama.hpp"

#include "tessera/models/param_reader.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {

int64_t llama_default_ffn(int64_t d_model) noexcept {
  const int64_t third = (8 * d_model + 2) / 3;  // ceil(8·d / 3)
  return (third + 7) / 8 * 8;
}

LlamaConfig parse_llama_config(const sdk::Options& options) {
  const ParamReader reader(options);
  LlamaConfig config;
  config.vocab = reader.integer("vocab", 2);
  config.layers = reader.integer("layers", 0, kMostLayers);
  config.d_model = reader.integer("d_model", 1);
  config.heads = reader.integer("heads", 1);
  const int64_t kv_heads = reader.integer("kv_heads", 0);
  config.kv_heads = kv_heads == 0 ? config.heads : kv_heads;
  config.seq_len = reader.integer("seq_len", 1);
  const int64_t ffn = reader.integer("ffn", 0);
  config.ffn = ffn == 0 ? llama_default_ffn(config.d_model) : ffn;
  config.rope_theta = reader.number("rope_theta", 0.0);
  config.norm_eps = reader.number("norm_eps", 0.0);
  config.kv_replicated = reader.boolean("kv_replicated");
  if (config.d_model % config.heads != 0) {
    reader.fail("heads", detail::concat("(", config.heads, ") must divide key 'd_model' (",
                                        config.d_model, ")"));
  }
  if ((config.d_model / config.heads) % 2 != 0) {
    reader.fail("heads",
                detail::concat("(", config.heads, ") with key 'd_model' (", config.d_model,
                               ") gives an odd head dimension (", config.d_model / config.heads,
                               "); rotary embeddings rotate pairs, it must be even"));
  }
  if (config.heads % config.kv_heads != 0) {
    reader.fail("kv_heads", detail::concat("(", config.kv_heads, ") must divide key 'heads' (",
                                           config.heads, ")"));
  }
  // The embedding's table, each block's projections and norms, the head's
  // norm and table.
  const auto d = static_cast<double>(config.d_model);
  const double kv = d / static_cast<double>(config.heads) * static_cast<double>(config.kv_heads);
  const double block = 2 * d * d + 2 * d * kv + 3 * d * static_cast<double>(config.ffn) + 2 * d;
  reader.parameters(
      2 * static_cast<double>(config.vocab) * d + static_cast<double>(config.layers) * block + d,
      "'vocab', 'layers', 'd_model', 'kv_heads' and 'ffn'");
  return config;
}

std::vector<std::unique_ptr<Unit>> build_llama_units(const LlamaConfig& config) {
  std::vector<std::unique_ptr<Unit>> units;
  units.push_back(std::make_unique<LlamaEmbedding>("embed", config));
  for (int64_t i = 0; i < config.layers; ++i) {
    units.push_back(std::make_unique<LlamaBlock>("block" + std::to_string(i), config));
  }
  units.push_back(std::make_unique<LlamaHead>("head", config));
  return units;
}

std::vector<std::unique_ptr<Unit>> cuda_llama_units(const cuda::UnitFactory& factory,
                                                    const tessera_host_api* host,
                                                    const LlamaConfig& config,
                                                    std::vector<std::unique_ptr<Unit>> units) {
  units.front() = factory.llama_embedding(host, std::move(units.front()), config.vocab,
                                          config.d_model, config.seq_len);
  const cuda::LlamaShape shape{config.d_model,  config.heads,        config.kv_heads,
                               config.ffn,      config.seq_len,      config.rope_theta,
                               config.norm_eps, config.kv_replicated};
  for (std::size_t i = 1; i + 1 < units.size(); ++i) {
    units[i] = factory.llama_block(host, std::move(units[i]), shape);
  }
  units.back() = factory.llama_head(host, std::move(units.back()), config.vocab, config.d_model,
                                    config.norm_eps);
  return units;
}

}  // namespace tessera::model

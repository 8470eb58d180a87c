// Configuration and assembly of the gpt reference model (see gpt.hpp).
#include "gpt.hpp"

#include "tessera/models/param_reader.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {

GptConfig parse_gpt_config(const sdk::Options& options) {
  const ParamReader reader(options);
  GptConfig config;
  config.vocab = reader.integer("vocab", 2);
  config.layers = reader.integer("layers", 0, kMostLayers);
  config.d_model = reader.integer("d_model", 1);
  config.heads = reader.integer("heads", 1);
  config.seq_len = reader.integer("seq_len", 1);
  config.tied_head = reader.boolean("tied_head");
  config.mlp_ratio = reader.integer("mlp_ratio", 1);
  if (config.d_model % config.heads != 0) {
    reader.fail("heads", detail::concat("(", config.heads, ") must divide key 'd_model' (",
                                        config.d_model, ")"));
  }
  // The embedding's token and position tables, each block's q|k|v,
  // projection, MLP and LayerNorms, the head's LayerNorm and untied table.
  const auto d = static_cast<double>(config.d_model);
  const auto hid = static_cast<double>(config.mlp_ratio) * d;
  const double block = 4 * d * d + 4 * d + 2 * d * hid + hid + d + 4 * d;
  reader.parameters((static_cast<double>(config.vocab) + static_cast<double>(config.seq_len)) * d +
                        static_cast<double>(config.layers) * block + 2 * d +
                        (config.tied_head ? 0.0 : d * static_cast<double>(config.vocab)),
                    "'vocab', 'layers', 'd_model', 'seq_len' and 'mlp_ratio'");
  return config;
}

std::vector<std::unique_ptr<Unit>> build_gpt_units(const GptConfig& config) {
  std::vector<std::unique_ptr<Unit>> units;
  units.push_back(
      std::make_unique<GptEmbedding>("embed", config.vocab, config.d_model, config.seq_len));
  for (int64_t i = 0; i < config.layers; ++i) {
    units.push_back(std::make_unique<GptBlock>("block" + std::to_string(i), config.d_model,
                                               config.heads, config.mlp_ratio, config.seq_len));
  }
  units.push_back(std::make_unique<GptHead>("head", config.vocab, config.d_model,
                                            config.tied_head ? "embed.wte" : "", config.seq_len));
  return units;
}

std::vector<std::unique_ptr<Unit>> cuda_gpt_units(const cuda::UnitFactory& factory,
                                                  const tessera_host_api* host,
                                                  const GptConfig& config,
                                                  std::vector<std::unique_ptr<Unit>> units) {
  units.front() = factory.gpt_embedding(host, std::move(units.front()), config.vocab,
                                        config.d_model, config.seq_len);
  for (std::size_t i = 1; i + 1 < units.size(); ++i) {
    units[i] = factory.gpt_block(host, std::move(units[i]), config.d_model, config.heads,
                                 config.mlp_ratio * config.d_model);
  }
  units.back() = factory.gpt_head(host, std::move(units.back()), config.vocab, config.d_model);
  return units;
}

}  // namespace tessera::model

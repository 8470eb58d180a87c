// make_dataset: the source named by [data], checked before training.
#include <memory>
#include <string>

#include "tessera/core/data/dataset.hpp"
#include "tessera/core/data/synthetic.hpp"
#include "tessera/core/data/token_file_dataset.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {

std::unique_ptr<Dataset> make_dataset(const DataSection& data, const DataShape& shape,
                                      uint64_t seed, const DataOptions& options) {
  const bool sequence = shape.seq_len > 0 && shape.vocab > 0;
  const bool classes = shape.features > 0 && shape.classes > 0;
  TESSERA_CHECK(sequence != classes, TESSERA_ERR_INVALID_ARGUMENT,
                "data: the model must take either token sequences (seq_len, vocab) or features "
                "(features, classes); got seq_len ",
                shape.seq_len, ", vocab ", shape.vocab, ", features ", shape.features, ", classes ",
                shape.classes);
  if (data.kind == "synthetic") {
    if (sequence) {
      return std::make_unique<SyntheticSequences>(shape, seed, options.noise);
    }
    return std::make_unique<SyntheticClusters>(shape, seed, options.cluster_spread);
  }
  if (data.kind == "text" || data.kind == "tokens") {
    TESSERA_CHECK(sequence, TESSERA_ERR_INVALID_ARGUMENT, "data.kind = '", data.kind,
                  "' gives token sequences, but the model takes ", shape.features,
                  " features (use data.kind = 'synthetic')");
    TESSERA_CHECK(!data.path.empty(), TESSERA_ERR_INVALID_ARGUMENT, "data.kind = '", data.kind,
                  "' needs 'data.path'");
    if (data.kind == "text") {
      return std::make_unique<TokenFileDataset>(data.path, 1, shape, "text");
    }
    TESSERA_CHECK(options.token_bytes == 2 || options.token_bytes == 4,
                  TESSERA_ERR_INVALID_ARGUMENT, "data: token_bytes ", options.token_bytes,
                  " is not supported for '", data.path, "' (2 for u16 or 4 for u32 ids)");
    return std::make_unique<TokenFileDataset>(data.path, options.token_bytes, shape, "tokens");
  }
  throw Error(TESSERA_ERR_INVALID_ARGUMENT,
              "unknown 'data.kind' = '" + data.kind + "'; valid: synthetic, text, tokens");
}

}  // namespace tessera

// Seeded synthetic data: permutation-following sequences and Gaussian
// clusters.
#include "tessera/core/data/synthetic.hpp"

#include <cmath>
#include <numeric>
#include <utility>

#include "tessera/sdk/error.hpp"
#include "tessera/sdk/rng.hpp"

namespace tessera {

namespace {

// Streams of the seed used for the fixed structure (rule, centres), apart
// from the per-example keys.
constexpr uint64_t kRuleStream = 0x72756C65ULL;    // "rule"
constexpr uint64_t kCentreStream = 0x63656E74ULL;  // "cent"

}  // namespace

SyntheticSequences::SyntheticSequences(const DataShape& shape, uint64_t seed, double noise)
    : shape_(shape), noise_(noise) {
  TESSERA_CHECK(shape.seq_len >= 1, TESSERA_ERR_INVALID_ARGUMENT, "synthetic sequences: seq_len ",
                shape.seq_len, " must be >= 1");
  TESSERA_CHECK(shape.vocab >= 2, TESSERA_ERR_INVALID_ARGUMENT, "synthetic sequences: vocab ",
                shape.vocab, " must be >= 2");
  TESSERA_CHECK(noise >= 0.0 && noise <= 1.0, TESSERA_ERR_INVALID_ARGUMENT,
                "synthetic sequences: noise ", noise, " must be in [0, 1]");
  // Fisher-Yates shuffle of 0..vocab-1 from the seed.
  next_.resize(static_cast<size_t>(shape.vocab));
  std::iota(next_.begin(), next_.end(), 0);
  KeyedRng rng(splitmix64(seed ^ kRuleStream));
  for (size_t i = next_.size() - 1; i > 0; --i) {
    std::swap(next_[i], next_[rng.below(i + 1)]);
  }
}

std::string SyntheticSequences::describe() const {
  return detail::concat("synthetic sequences: vocab ", shape_.vocab, ", seq_len ", shape_.seq_len,
                        ", noise ", noise_);
}

void SyntheticSequences::fill(uint64_t key, Batch& batch, int64_t row) const {
  const int64_t t_len = shape_.seq_len;
  const auto vocab = static_cast<uint64_t>(shape_.vocab);
  KeyedRng rng(key);
  int32_t* tokens = batch.tokens.data() + row * t_len;
  int32_t* targets = batch.targets.data() + row * t_len;
  auto current = static_cast<int32_t>(rng.below(vocab));
  for (int64_t t = 0; t < t_len; ++t) {
    const bool noisy = noise_ > 0.0 && rng.uniform() < noise_;
    const int32_t following =
        noisy ? static_cast<int32_t>(rng.below(vocab)) : next_[static_cast<size_t>(current)];
    tokens[t] = current;
    targets[t] = following;
    current = following;
  }
}

SyntheticClusters::SyntheticClusters(const DataShape& shape, uint64_t seed, double spread)
    : shape_(shape) {
  TESSERA_CHECK(shape.features >= 1, TESSERA_ERR_INVALID_ARGUMENT, "synthetic clusters: features ",
                shape.features, " must be >= 1");
  TESSERA_CHECK(shape.classes >= 2, TESSERA_ERR_INVALID_ARGUMENT, "synthetic clusters: classes ",
                shape.classes, " must be >= 2");
  TESSERA_CHECK(std::isfinite(spread) && spread > 0.0, TESSERA_ERR_INVALID_ARGUMENT,
                "synthetic clusters: spread ", spread, " must be > 0");
  centres_.resize(static_cast<size_t>(shape.classes * shape.features));
  KeyedRng rng(splitmix64(seed ^ kCentreStream));
  for (float& c : centres_) {
    c = static_cast<float>(spread * rng.normal());
  }
}

std::string SyntheticClusters::describe() const {
  return detail::concat("synthetic clusters: ", shape_.classes, " classes in ", shape_.features,
                        " dimensions");
}

std::vector<float> SyntheticClusters::centre(int64_t label) const {
  TESSERA_CHECK(label >= 0 && label < shape_.classes, TESSERA_ERR_INVALID_ARGUMENT,
                "synthetic clusters: class ", label, " does not exist (", shape_.classes,
                " classes)");
  const auto begin = centres_.begin() + label * shape_.features;
  return {begin, begin + shape_.features};
}

void SyntheticClusters::fill(uint64_t key, Batch& batch, int64_t row) const {
  const int64_t f_len = shape_.features;
  KeyedRng rng(key);
  const auto label = static_cast<int64_t>(rng.below(static_cast<uint64_t>(shape_.classes)));
  const float* centre = centres_.data() + label * f_len;
  float* inputs = batch.inputs.data() + row * f_len;
  for (int64_t f = 0; f < f_len; ++f) {
    inputs[f] = centre[f] + static_cast<float>(rng.normal());
  }
  batch.targets[static_cast<size_t>(row)] = static_cast<int32_t>(label);
}

}  // namespace tessera

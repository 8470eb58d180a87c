// Synthetic data generated from the run's seed: learnable, so a small
// model's loss visibly falls, and needing no file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/data/dataset.hpp"

namespace tessera {

// Token sequences that follow a fixed random permutation `next` of the
// vocabulary (drawn from the seed): an example starts at a random token and
// each following token is next[previous], except that with probability
// `noise` it is a uniformly random token instead. A model that learns the
// permutation predicts all but the noisy tokens, so the loss falls from
// ln(vocab) towards about noise * ln(vocab).
class SyntheticSequences final : public Dataset {
 public:
  // Throws tessera::Error (invalid argument) when seq_len < 1, vocab < 2 or
  // noise is outside [0, 1].
  SyntheticSequences(const DataShape& shape, uint64_t seed, double noise);

  [[nodiscard]] const DataShape& shape() const noexcept override { return shape_; }
  [[nodiscard]] std::string describe() const override;
  void fill(uint64_t key, Batch& batch, int64_t row) const override;

  // The permutation the sequences follow.
  [[nodiscard]] const std::vector<int32_t>& rule() const noexcept { return next_; }

 private:
  DataShape shape_;
  double noise_;
  std::vector<int32_t> next_;
};

// Points drawn from `classes` Gaussian clusters in `features` dimensions:
// the centres are drawn once from the seed (each coordinate normal with
// std-dev `spread`), an example picks a class uniformly and adds unit
// normal noise to its centre. Linearly separable enough for an mlp.
class SyntheticClusters final : public Dataset {
 public:
  // Throws tessera::Error (invalid argument) when features < 1, classes < 2
  // or spread is not > 0.
  SyntheticClusters(const DataShape& shape, uint64_t seed, double spread);

  [[nodiscard]] const DataShape& shape() const noexcept override { return shape_; }
  [[nodiscard]] std::string describe() const override;
  void fill(uint64_t key, Batch& batch, int64_t row) const override;

  // Centre of `label` (features values).
  [[nodiscard]] std::vector<float> centre(int64_t label) const;

 private:
  DataShape shape_;
  std::vector<float> centres_;  // [classes, features]
};

}  // namespace tessera

// Data sources. A Dataset turns a 64-bit sample key (drawn by the
// DistributedSampler from seed, step and position) into one example, so the
// same key gives the same example on every rank and in every run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/core/config.hpp"
#include "tessera/core/data/batch.hpp"

namespace tessera {

// What the model consumes: token sequences (seq_len > 0, vocab > 0) or
// feature vectors with a class (features > 0, classes > 0). Comes from the
// model's parameters.
struct DataShape {
  int64_t seq_len = 0;
  int64_t vocab = 0;
  int64_t features = 0;
  int64_t classes = 0;

  [[nodiscard]] bool is_sequence() const noexcept { return seq_len > 0; }

  // Token sequences of `seq_len` ids below `vocab`.
  static DataShape sequences(int64_t seq_len, int64_t vocab) noexcept {
    DataShape shape;
    shape.seq_len = seq_len;
    shape.vocab = vocab;
    return shape;
  }
  // Feature vectors of `features` floats with a class below `classes`.
  static DataShape classification(int64_t features, int64_t classes) noexcept {
    DataShape shape;
    shape.features = features;
    shape.classes = classes;
    return shape;
  }
};

// Settings of the sources that the [data] section does not carry.
struct DataOptions {
  int token_bytes = 2;          // `tokens` files: 2 (u16) or 4 (u32), little-endian
  double noise = 0.05;          // synthetic sequences: chance a token breaks the rule
  double cluster_spread = 3.0;  // synthetic classification: std-dev of the centres
};

// One source of examples.
class Dataset {
 public:
  virtual ~Dataset() = default;

  // Layout of the examples (sequence or classification).
  [[nodiscard]] virtual const DataShape& shape() const noexcept = 0;
  // One line for logs: kind, file and size.
  [[nodiscard]] virtual std::string describe() const = 0;
  // Writes the example for `key` into row `row` of `batch`, which has this
  // dataset's layout (Batch::make with the shape's seq_len / features).
  // Deterministic in `key`. Generated sources never fail for a batch of the
  // right layout; file sources throw tessera::Error naming the file when it
  // was truncated after it was opened. Called from several threads at once
  // for different rows of one batch (DistributedSampler), so it must be
  // safe to call concurrently.
  virtual void fill(uint64_t key, Batch& batch, int64_t row) const = 0;
};

// The source selected by [data] for a model of `shape`:
//   synthetic: generated from `seed` (sequences or Gaussian clusters, by shape)
//   text:      the bytes of data.path as tokens (the vocabulary must be >= the
//              largest byte present; 256 covers any file)
//   tokens:    data.path as little-endian ids of options.token_bytes bytes
// Every check happens here, before training: throws tessera::Error
// (invalid argument) naming the file (and position) for a missing or empty
// file, one that is not a regular file (a FIFO, a device, a directory), a
// byte count not a multiple of token_bytes, fewer than seq_len + 1 tokens,
// a token id >= vocab; and naming the key for an unknown kind, a
// shape that is neither layout, a file kind for a classification model, or
// token_bytes other than 2 or 4.
std::unique_ptr<Dataset> make_dataset(const DataSection& data, const DataShape& shape,
                                      uint64_t seed, const DataOptions& options = {});

}  // namespace tessera

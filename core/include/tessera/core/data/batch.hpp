// A batch of training examples, as the models consume it.
//
// Two layouts, told apart by `seq_len` and `features`:
//  * sequences (gpt-like models): `tokens` and `targets` are int32 [size,
//    seq_len] row-major; targets[b][t] is the token after tokens[b][t]
//    (each example is a window of seq_len + 1 ids, shifted by one).
//  * classification (the mlp): `inputs` is f32 [size, features] row-major
//    and `targets` int32 [size], the class of each row.
// Unused vectors stay empty. `first` is the index of the batch's first
// example within the global batch of its step, so slices keep their place.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera {

struct Batch {
  int64_t size = 0;      // number of examples (B)
  int64_t seq_len = 0;   // T for sequences, 0 for classification
  int64_t features = 0;  // F for classification, 0 for sequences
  int64_t first = 0;     // index of example 0 within the global batch

  std::vector<int32_t> tokens;   // [B, T] (sequences)
  std::vector<int32_t> targets;  // [B, T] (sequences) or [B] (classification)
  std::vector<float> inputs;     // [B, F] (classification)

  // Whether this is a sequence batch (seq_len > 0).
  [[nodiscard]] bool is_sequence() const noexcept { return seq_len > 0; }

  // An empty batch of `size` examples in the given layout, with every
  // vector sized and zeroed. Exactly one of seq_len and features must be
  // > 0; throws tessera::Error (invalid argument) otherwise or when size < 0.
  static Batch make(int64_t size, int64_t seq_len, int64_t features);

  // Rows [begin, begin + count) as a new batch (first = this->first +
  // begin). Throws tessera::Error (invalid argument) when the range is not
  // inside the batch.
  [[nodiscard]] Batch slice(int64_t begin, int64_t count) const;
};

// Sizes of `parts` contiguous pieces of `total` items: total / parts each,
// the first total % parts pieces one more. Throws tessera::Error (invalid
// argument) when parts < 1 or total < 0.
std::vector<int64_t> split_sizes(int64_t total, int64_t parts);

// `batch` split into `parts` contiguous micro-batches by split_sizes, in
// order. Throws tessera::Error (invalid argument) when parts < 1 or parts >
// batch.size (every micro-batch must hold at least one example).
std::vector<Batch> split_batch(const Batch& batch, int64_t parts);

}  // namespace tessera

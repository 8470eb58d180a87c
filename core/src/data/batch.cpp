// Batch construction, slicing and splitting into micro-batches.
#include "tessera/core/data/batch.hpp"

#include <algorithm>

#include "tessera/sdk/error.hpp"

namespace tessera {

Batch Batch::make(int64_t size, int64_t seq_len, int64_t features) {
  TESSERA_CHECK(size >= 0, TESSERA_ERR_INVALID_ARGUMENT, "batch of ", size, " examples");
  TESSERA_CHECK((seq_len > 0) != (features > 0), TESSERA_ERR_INVALID_ARGUMENT,
                "a batch holds either sequences or features: seq_len ", seq_len, ", features ",
                features);
  Batch batch;
  batch.size = size;
  batch.seq_len = seq_len > 0 ? seq_len : 0;
  batch.features = features > 0 ? features : 0;
  if (batch.is_sequence()) {
    batch.tokens.assign(static_cast<size_t>(size * seq_len), 0);
    batch.targets.assign(static_cast<size_t>(size * seq_len), 0);
  } else {
    batch.inputs.assign(static_cast<size_t>(size * features), 0.0F);
    batch.targets.assign(static_cast<size_t>(size), 0);
  }
  return batch;
}

Batch Batch::slice(int64_t begin, int64_t count) const {
  TESSERA_CHECK(begin >= 0 && count >= 0 && begin + count <= size, TESSERA_ERR_INVALID_ARGUMENT,
                "rows [", begin, ", ", begin + count, ") are outside a batch of ", size);
  Batch out = make(count, seq_len, features);
  out.first = first + begin;
  const auto copy_rows = [&](const auto& from, auto& to, int64_t width) {
    const auto start = from.begin() + begin * width;
    std::copy(start, start + count * width, to.begin());
  };
  if (is_sequence()) {
    copy_rows(tokens, out.tokens, seq_len);
    copy_rows(targets, out.targets, seq_len);
  } else {
    copy_rows(inputs, out.inputs, features);
    copy_rows(targets, out.targets, 1);
  }
  return out;
}

std::vector<int64_t> split_sizes(int64_t total, int64_t parts) {
  TESSERA_CHECK(parts >= 1, TESSERA_ERR_INVALID_ARGUMENT, "cannot split into ", parts, " parts");
  TESSERA_CHECK(total >= 0, TESSERA_ERR_INVALID_ARGUMENT, "cannot split ", total, " items");
  std::vector<int64_t> sizes(static_cast<size_t>(parts), total / parts);
  for (int64_t k = 0; k < total % parts; ++k) {
    ++sizes[static_cast<size_t>(k)];
  }
  return sizes;
}

std::vector<Batch> split_batch(const Batch& batch, int64_t parts) {
  TESSERA_CHECK(parts >= 1 && parts <= batch.size, TESSERA_ERR_INVALID_ARGUMENT,
                "cannot split a batch of ", batch.size, " examples into ", parts,
                " micro-batches (each needs at least one example)");
  std::vector<Batch> out;
  out.reserve(static_cast<size_t>(parts));
  int64_t begin = 0;
  for (const int64_t count : split_sizes(batch.size, parts)) {
    out.push_back(batch.slice(begin, count));
    begin += count;
  }
  return out;
}

}  // namespace tessera

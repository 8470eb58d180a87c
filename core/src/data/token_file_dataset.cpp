// Windows of consecutive ids from a memory-mapped file.
#include "tessera/core/data/token_file_dataset.hpp"

#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera {

namespace {

// Reads the little-endian id of `width` bytes at `at`.
uint32_t read_id(const std::byte* at, int width) noexcept {
  if (width == 1) {
    return std::to_integer<uint32_t>(*at);
  }
  uint32_t value = 0;
  for (int b = width - 1; b >= 0; --b) {
    value = (value << 8) | std::to_integer<uint32_t>(at[b]);
  }
  return value;
}

}  // namespace

TokenFileDataset::TokenFileDataset(const std::filesystem::path& path, int token_bytes,
                                   const DataShape& shape, std::string kind)
    : file_(path), token_bytes_(token_bytes), shape_(shape), kind_(std::move(kind)) {
  const std::string name = "data file '" + path.string() + "'";
  TESSERA_CHECK(token_bytes == 1 || token_bytes == 2 || token_bytes == 4,
                TESSERA_ERR_INVALID_ARGUMENT, name, ": token_bytes ", token_bytes,
                " is not supported (2 for u16 or 4 for u32 ids)");
  TESSERA_CHECK(shape.seq_len >= 1 && shape.vocab >= 1, TESSERA_ERR_INVALID_ARGUMENT, name, ": '",
                kind_, "' data needs a sequence model (seq_len ", shape.seq_len, ", vocab ",
                shape.vocab, ")");
  const size_t bytes = file_.bytes().size();
  TESSERA_CHECK(bytes % static_cast<size_t>(token_bytes) == 0, TESSERA_ERR_INVALID_ARGUMENT, name,
                " has ", bytes, " bytes, not a multiple of token_bytes = ", token_bytes,
                " (truncated or not a u", token_bytes * 8, " token file?)");
  count_ = static_cast<int64_t>(bytes / static_cast<size_t>(token_bytes));
  TESSERA_CHECK(count_ >= shape.seq_len + 1, TESSERA_ERR_INVALID_ARGUMENT, name, " holds ", count_,
                " tokens, fewer than seq_len + 1 = ", shape.seq_len + 1);
  const std::byte* data = file_.bytes().data();
  const auto vocab = static_cast<uint64_t>(shape.vocab);
  for (int64_t i = 0; i < count_; ++i) {
    const uint32_t id = read_id(data + i * token_bytes, token_bytes);
    TESSERA_CHECK(id < vocab, TESSERA_ERR_INVALID_ARGUMENT, name, ": token ", i, " (byte offset ",
                  i * token_bytes, ") is ", id, ", outside the vocabulary of ", shape.vocab);
  }
}

std::string TokenFileDataset::describe() const {
  return detail::concat(kind_, " file '", file_.path().string(), "': ", count_, " tokens of ",
                        token_bytes_, " byte(s), vocab ", shape_.vocab, ", seq_len ",
                        shape_.seq_len);
}

int32_t TokenFileDataset::token(int64_t index) const noexcept {
  return static_cast<int32_t>(read_id(file_.bytes().data() + index * token_bytes_, token_bytes_));
}

void TokenFileDataset::fill(uint64_t key, Batch& batch, int64_t row) const {
  const int64_t t_len = shape_.seq_len;
  const auto windows = static_cast<uint64_t>(count_ - t_len);
  const auto start = static_cast<int64_t>(key % windows);
  int32_t* tokens = batch.tokens.data() + row * t_len;
  int32_t* targets = batch.targets.data() + row * t_len;
  for (int64_t t = 0; t < t_len; ++t) {
    tokens[t] = token(start + t);
    targets[t] = token(start + t + 1);
  }
}

}  // namespace tessera

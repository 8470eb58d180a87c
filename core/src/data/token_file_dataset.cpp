// Windows of consecutive ids read from a file with pread().
#include "tessera/core/data/token_file_dataset.hpp"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

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

// Bytes read at a time while scanning the file once.
constexpr size_t kScanChunk = size_t{1} << 20;

// A window of this many bytes or fewer is read into a buffer on the stack.
constexpr size_t kStackWindow = 4096;

}  // namespace

TokenFileDataset::TokenFileDataset(const std::filesystem::path& path, int token_bytes,
                                   const DataShape& shape, std::string kind)
    : file_(path, "data file"), token_bytes_(token_bytes), shape_(shape), kind_(std::move(kind)) {
  const std::string name = "data file '" + path.string() + "'";
  TESSERA_CHECK(token_bytes == 1 || token_bytes == 2 || token_bytes == 4,
                TESSERA_ERR_INVALID_ARGUMENT, name, ": token_bytes ", token_bytes,
                " is not supported (2 for u16 or 4 for u32 ids)");
  TESSERA_CHECK(shape.seq_len >= 1 && shape.vocab >= 1, TESSERA_ERR_INVALID_ARGUMENT, name, ": '",
                kind_, "' data needs a sequence model (seq_len ", shape.seq_len, ", vocab ",
                shape.vocab, ")");
  const uint64_t bytes = file_.size();
  TESSERA_CHECK(bytes > 0, TESSERA_ERR_INVALID_ARGUMENT, name, " is empty");
  TESSERA_CHECK(bytes % static_cast<uint64_t>(token_bytes) == 0, TESSERA_ERR_INVALID_ARGUMENT, name,
                " has ", bytes, " bytes, not a multiple of token_bytes = ", token_bytes,
                " (truncated or not a u", token_bytes * 8, " token file?)");
  count_ = static_cast<int64_t>(bytes / static_cast<uint64_t>(token_bytes));
  TESSERA_CHECK(count_ >= shape.seq_len + 1, TESSERA_ERR_INVALID_ARGUMENT, name, " holds ", count_,
                " tokens, fewer than seq_len + 1 = ", shape.seq_len + 1);
  const auto vocab = static_cast<uint64_t>(shape.vocab);
  std::vector<std::byte> chunk(std::min<uint64_t>(kScanChunk, bytes));
  const int64_t per_chunk = static_cast<int64_t>(chunk.size()) / token_bytes;
  for (int64_t first = 0; first < count_; first += per_chunk) {
    const int64_t n = std::min(per_chunk, count_ - first);
    read_exactly(first, n, chunk.data());
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t id = read_id(chunk.data() + i * token_bytes, token_bytes);
      TESSERA_CHECK(id < vocab, TESSERA_ERR_INVALID_ARGUMENT, name, ": token ", first + i,
                    " (byte offset ", (first + i) * token_bytes, ") is ", id,
                    ", outside the vocabulary of ", shape.vocab);
    }
  }
}

void TokenFileDataset::read_exactly(int64_t first, int64_t count, std::byte* out) const {
  const auto width = static_cast<uint64_t>(token_bytes_);
  const uint64_t offset = static_cast<uint64_t>(first) * width;
  const uint64_t want = static_cast<uint64_t>(count) * width;
  const size_t got = file_.read_at(offset, out, static_cast<size_t>(want));
  if (got == want) return;
  // The file shrank under the run (a reader of a mapping would get SIGBUS).
  throw Error(
      TESSERA_ERR_INVALID_ARGUMENT,
      detail::concat("data file '", file_.path().string(), "' was truncated while in use: it had ",
                     file_.size(), " bytes when opened, ", file_.current_size(),
                     " bytes now (this example needs bytes ", offset, " to ", offset + want, ")"));
}

std::string TokenFileDataset::describe() const {
  return detail::concat(kind_, " file '", file_.path().string(), "': ", count_, " tokens of ",
                        token_bytes_, " byte(s), vocab ", shape_.vocab, ", seq_len ",
                        shape_.seq_len);
}

int32_t TokenFileDataset::token(int64_t index) const {
  std::array<std::byte, 4> bytes{};
  read_exactly(index, 1, bytes.data());
  return static_cast<int32_t>(read_id(bytes.data(), token_bytes_));
}

void TokenFileDataset::fill(uint64_t key, Batch& batch, int64_t row) const {
  const int64_t t_len = shape_.seq_len;
  const auto windows = static_cast<uint64_t>(count_ - t_len);
  const auto start = static_cast<int64_t>(key % windows);
  // The window: seq_len + 1 ids, read with one pread.
  const auto window_bytes = static_cast<size_t>((t_len + 1) * token_bytes_);
  std::array<std::byte, kStackWindow> small{};
  std::vector<std::byte> large;
  std::byte* window = small.data();
  if (window_bytes > small.size()) {
    large.resize(window_bytes);
    window = large.data();
  }
  read_exactly(start, t_len + 1, window);
  int32_t* tokens = batch.tokens.data() + row * t_len;
  int32_t* targets = batch.targets.data() + row * t_len;
  for (int64_t t = 0; t < t_len; ++t) {
    tokens[t] = static_cast<int32_t>(read_id(window + t * token_bytes_, token_bytes_));
    targets[t] = static_cast<int32_t>(read_id(window + (t + 1) * token_bytes_, token_bytes_));
  }
}

}  // namespace tessera

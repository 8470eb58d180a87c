// Sequences cut from a file of token ids: `text` (one byte per token) and
// `tokens` (little-endian u16 or u32 ids), read with pread().
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "tessera/core/data/dataset.hpp"
#include "tessera/core/input_file.hpp"

namespace tessera {

// Each example is the window of seq_len + 1 consecutive ids starting at
// offset key % (tokens - seq_len): inputs the first seq_len, targets the
// last seq_len.
class TokenFileDataset final : public Dataset {
 public:
  // Opens `path` holding ids of `token_bytes` bytes (1, 2 or 4) and scans
  // it once. `kind` ("text" or "tokens") only labels messages. Throws
  // tessera::Error (invalid argument) naming the file when it is missing,
  // not a regular file (InputFile) or empty, for token_bytes not 1/2/4, a
  // size not a multiple of token_bytes, fewer than seq_len + 1 ids, and the
  // first id >= vocab (with its index, byte offset and value); requires
  // shape.seq_len >= 1 and shape.vocab >= 1.
  TokenFileDataset(const std::filesystem::path& path, int token_bytes, const DataShape& shape,
                   std::string kind);

  [[nodiscard]] const DataShape& shape() const noexcept override { return shape_; }
  [[nodiscard]] std::string describe() const override;
  // Reads the example's window from the file (one pread; thread-safe).
  // Throws tessera::Error (invalid argument) naming the file and its size
  // when opened and now if the file was truncated since it was opened.
  void fill(uint64_t key, Batch& batch, int64_t row) const override;

  // Number of ids in the file.
  [[nodiscard]] int64_t tokens() const noexcept { return count_; }
  // Id at `index` (0 <= index < tokens()); throws like fill().
  [[nodiscard]] int32_t token(int64_t index) const;

 private:
  // Reads ids [first, first + count) into `out`; throws naming the file
  // when it has been truncated below them.
  void read_exactly(int64_t first, int64_t count, std::byte* out) const;

  InputFile file_;
  int token_bytes_;
  DataShape shape_;
  std::string kind_;
  int64_t count_ = 0;
};

}  // namespace tessera

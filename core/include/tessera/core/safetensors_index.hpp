// Sharded checkpoints: one safetensors file per rank plus a JSON index that
// says which element range of every (flattened) tensor lives in which file.
// Independent of any strategy: whoever shards a tensor writes its slices and
// describes them here; any world size can read them back by element range.
//
// Index layout (see docs/checkpoints.md):
//   { "metadata": {"<key>": "<value>", ...}, "world_size": N,
//     "tensors": { "<name>": { "dtype": "F32", "shape": [...],
//       "slices": [ {"file": "rank00000.safetensors", "key": "<name>",
//                    "offset": <first element>, "count": <elements>}, ... ] } } }
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/c/common.h"
#include "tessera/core/safetensors.hpp"

namespace tessera {

// `count` elements of a tensor's flattened (row-major) elements starting at
// element `offset`, stored as tensor `key` (any shape with `count` elements)
// in safetensors file `file`, a path relative to the index's directory.
struct ShardSlice {
  std::string file;
  std::string key;
  uint64_t offset = 0;
  uint64_t count = 0;
};

// A full tensor of a sharded checkpoint and where its elements are stored.
struct ShardedTensor {
  tessera_dtype dtype = TESSERA_F32;
  std::vector<uint64_t> shape;  // shape of the full tensor
  std::vector<ShardSlice> slices;
};

// Contents of an index file.
struct ShardedIndex {
  std::map<std::string, std::string> metadata;
  int world_size = 1;  // ranks that wrote the checkpoint
  std::map<std::string, ShardedTensor> tensors;
};

// A range of elements [offset, offset + count).
struct ElementRange {
  uint64_t offset = 0;
  uint64_t count = 0;
};

// The part of `numel` elements that `rank` of `world_size` owns when they
// are split as evenly as possible: the first numel % world_size ranks get one
// element more. Throws tessera::Error (invalid argument) unless
// 0 <= rank < world_size.
ElementRange even_shard(uint64_t numel, int world_size, int rank);

// Conventional file name of `rank`'s shard: "rank00000.safetensors".
std::string shard_file_name(int rank);

// Checks the structure of `index`: world_size >= 1, known dtypes, slice
// files are non-empty relative paths without "..", and the slices of every
// tensor cover its elements exactly once (no overlap, no gap, nothing past
// the end; empty slices are allowed). Throws tessera::Error (invalid
// argument) naming `where` (e.g. the index path) and the tensor at fault.
void validate_index(const ShardedIndex& index, std::string_view where);

// Validates `index` (as validate_index) and writes it as JSON to `path`
// atomically (see write_file_atomically). Throws tessera::Error naming the
// path on failure; the previous file is then left untouched.
void write_index(const std::filesystem::path& path, const ShardedIndex& index);

// Reads and validates the index at `path`: its JSON and field types, the
// checks of validate_index, and that every slice file exists next to it.
// Throws tessera::Error naming the path (and tensor, slice or file).
ShardedIndex read_index(const std::filesystem::path& path);

// A sharded checkpoint opened for reading: assembles any element range of a
// tensor from the rank files, whatever world size wrote them. Rank files are
// opened (and validated) on first use and kept mapped. Not thread-safe.
class ShardedCheckpoint {
 public:
  // Reads the index at `index_path` (see read_index).
  static ShardedCheckpoint open(const std::filesystem::path& index_path);

  ShardedCheckpoint(ShardedCheckpoint&&) noexcept;
  ShardedCheckpoint& operator=(ShardedCheckpoint&&) noexcept;
  ~ShardedCheckpoint();

  [[nodiscard]] const ShardedIndex& index() const noexcept;
  // Description of tensor `name`; throws tessera::Error (invalid argument)
  // naming the index and the tensor if there is none.
  [[nodiscard]] const ShardedTensor& tensor(std::string_view name) const;

  // Copies elements [offset, offset + count) of the flattened tensor `name`
  // into `out`, which must be exactly count * element size bytes. Throws
  // tessera::Error if the range runs past the tensor, `out` has another
  // size, or a rank file is missing, corrupt, lacks the slice's key, or
  // stores it with another dtype or element count (message names the file
  // and key).
  void read_range(std::string_view name, uint64_t offset, uint64_t count, std::span<std::byte> out);

  // Typed form of read_range: `out.size()` elements from `offset`; the
  // tensor's dtype must be dtype_of<T> (else tessera::Error, mismatch).
  template <typename T>
  void read(std::string_view name, uint64_t offset, std::span<T> out) {
    check_dtype(name, dtype_of<T>::value);
    read_range(name, offset, out.size(), std::as_writable_bytes(out));
  }

  // The whole flattened tensor `name` as raw little-endian bytes.
  [[nodiscard]] std::vector<std::byte> read_full(std::string_view name);

 private:
  struct Impl;
  explicit ShardedCheckpoint(std::unique_ptr<Impl> impl);
  void check_dtype(std::string_view name, tessera_dtype dtype) const;

  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera

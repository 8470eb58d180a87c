// Sharded checkpoints: one safetensors file per rank plus a JSON index that
// says which part of every tensor lives in which file: a flat element range
// of the (row-major flattened) tensor, or an N-d box. Independent of any
// strategy: whoever shards a tensor writes its slices and describes them
// here; any world size can read them back by element range or by box.
//
// Index layout, version 2 (see docs/checkpoints.md):
//   { "version": 2, "metadata": {"<key>": "<value>", ...}, "world_size": N,
//     "tensors": { "<name>": { "dtype": "F32", "shape": [...],
//       "slices": [ {"file": "rank00000.safetensors", "key": "<name>",
//                    "offset": <first element>, "count": <elements>},
//                   {"file": "rank00001.safetensors", "key": "<name>@4",
//                    "box_offset": [...], "box_extent": [...]}, ... ] } } }
// An index without "version" is version 1 (flat slices only) and still reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/c/common.h"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/tensor_box.hpp"

namespace tessera {

// The index format version write_index writes; read_index reads it and
// every earlier one.
inline constexpr int kShardedIndexVersion = 2;

// Part of a tensor stored as tensor `key` (any shape with `count` elements)
// in safetensors file `file`, a path relative to the index's directory:
// either `count` consecutive elements of the tensor's flattened (row-major)
// elements starting at element `offset` (a flat slice), or, when `box` is
// set, the box's elements in row-major order of the box (a box slice:
// `offset` is 0 and `count` the box's element count).
struct ShardSlice {
  std::string file;
  std::string key;
  uint64_t offset = 0;
  uint64_t count = 0;
  std::optional<TensorBox> box = std::nullopt;
};

// How `slice`'s elements lie in its stored tensor, over a tensor of
// `shape`; the slice must lie inside it (validate_index).
SliceLayout slice_layout(std::span<const uint64_t> shape, const ShardSlice& slice);

// A full tensor of a sharded checkpoint and where its elements are stored.
struct ShardedTensor {
  tessera_dtype dtype = TESSERA_F32;
  std::vector<uint64_t> shape;  // shape of the full tensor
  std::vector<ShardSlice> slices;
};

// Contents of an index file.
struct ShardedIndex {
  // The format version read_index found (1: no "version" field, flat slices
  // only); write_index always writes kShardedIndexVersion.
  int version = kShardedIndexVersion;
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
// files are non-empty relative paths without "..", every box has one offset
// and one extent per dimension of the tensor with `count` its element count,
// and the slices of every tensor, flat and box alike, cover its elements
// exactly once (no overlap, no gap, nothing past the end; empty slices are
// allowed). Throws tessera::Error (invalid argument) naming `where` (e.g.
// the index path), the tensor and the slices at fault.
void validate_index(const ShardedIndex& index, std::string_view where);

// Validates `index` (as validate_index) and writes it as JSON to `path`
// atomically (see write_file_atomically). Throws tessera::Error naming the
// path on failure; the previous file is then left untouched.
void write_index(const std::filesystem::path& path, const ShardedIndex& index);

// Reads and validates the index at `path`: its version (1 or 2; box slices
// need 2), its JSON and field types, the checks of validate_index, and that
// every slice file exists next to it. Throws tessera::Error naming the path
// (and tensor, slice or file).
ShardedIndex read_index(const std::filesystem::path& path);

// A sharded checkpoint opened for reading: assembles any element range or
// box of a tensor from the rank files, whatever world size and whatever mix
// of flat and box slices wrote them. Rank files are opened (and validated)
// on first use and kept mapped. Not thread-safe.
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

  // Copies box `box` of tensor `name` (its elements in row-major order of
  // the box) into `out`, which must be exactly box.numel() * element size
  // bytes. Throws tessera::Error as read_range, and when `box` is not a box
  // of the tensor's shape (message names the box and the tensor).
  void read_box(std::string_view name, const TensorBox& box, std::span<std::byte> out);

  // Typed form of read_range: `out.size()` elements from `offset`; the
  // tensor's dtype must be dtype_of<T> (else tessera::Error, mismatch).
  template <typename T>
  void read(std::string_view name, uint64_t offset, std::span<T> out) {
    check_dtype(name, dtype_of<T>::value);
    read_range(name, offset, out.size(), std::as_writable_bytes(out));
  }

  // Typed form of read_box; `out.size()` must be box.numel().
  template <typename T>
  void read_box(std::string_view name, const TensorBox& box, std::span<T> out) {
    check_dtype(name, dtype_of<T>::value);
    read_box(name, box, std::as_writable_bytes(out));
  }

  // The whole flattened tensor `name` as raw little-endian bytes.
  [[nodiscard]] std::vector<std::byte> read_full(std::string_view name);

 private:
  struct Impl;
  explicit ShardedCheckpoint(std::unique_ptr<Impl> impl);
  void check_dtype(std::string_view name, tessera_dtype dtype) const;
  // Fills `out` (laid out as `want`) from the slices of tensor `t`.
  void read_into(std::string_view name, const ShardedTensor& t, const SliceLayout& want,
                 std::span<std::byte> out);

  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera

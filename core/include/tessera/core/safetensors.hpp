// safetensors files: the checkpoint format (see docs/checkpoints.md).
//
// Layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON (padded
// with spaces to a multiple of 8), then the raw little-endian tensor data.
// The JSON maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]} with offsets relative to the start of the data, plus an
// optional "__metadata__" object of string to string.
#pragma once

#include <bit>
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
#include "tessera/sdk/dtype.hpp"

namespace tessera {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts are not supported");

// The safetensors spelling of a dtype ("F32", "BF16", ...); throws
// tessera::Error (invalid argument) for a dtype outside TESSERA_F32..U8.
std::string_view safetensors_dtype_name(tessera_dtype dtype);

// The dtype spelled `name` in a safetensors header; nullopt for any spelling
// Tessera does not handle (e.g. "BOOL", "F8_E4M3", "f32").
std::optional<tessera_dtype> parse_safetensors_dtype(std::string_view name);

// Number of elements of a tensor of `shape` (1 for a scalar, shape {}).
// Throws tessera::Error (invalid argument) if the product overflows u64.
uint64_t shape_numel(std::span<const uint64_t> shape);

// One tensor of a safetensors file.
struct TensorInfo {
  std::string name;
  tessera_dtype dtype = TESSERA_F32;
  std::vector<uint64_t> shape;  // empty for a scalar
  uint64_t begin = 0;           // byte offsets relative to the data section
  uint64_t end = 0;

  [[nodiscard]] uint64_t numel() const { return shape_numel(shape); }
  [[nodiscard]] uint64_t nbytes() const { return end - begin; }
};

// Builds a safetensors file from tensors added by name, then writes it
// atomically. Tensors are stored in the order they were added. Data added
// by pointer is borrowed: it must stay valid and unchanged until save()
// returns. Nothing is copied into one big buffer; save() streams the header
// and then each tensor's bytes to the file.
class SafetensorsWriter {
 public:
  // Adds tensor `name` of `dtype` and `shape` whose numel(shape) elements
  // start at `data` (borrowed; may be null only when there are no elements).
  // Throws tessera::Error (invalid argument) for an empty name, the reserved
  // name "__metadata__", a name already added, an unknown dtype or a null
  // pointer with a non-empty shape.
  void add(std::string name, tessera_dtype dtype, std::vector<uint64_t> shape, const void* data);

  // Same, but the writer takes ownership of `bytes`, which must hold exactly
  // numel(shape) * element size bytes (else tessera::Error, mismatch).
  void add_owned(std::string name, tessera_dtype dtype, std::vector<uint64_t> shape,
                 std::vector<std::byte> bytes);

  // Typed convenience: `values` must hold exactly numel(shape) elements
  // (else tessera::Error, mismatch). Borrowed like add().
  template <typename T>
  void add(std::string name, std::vector<uint64_t> shape, std::span<const T> values) {
    check_count(name, shape, values.size());
    add(std::move(name), dtype_of<T>::value, std::move(shape), values.data());
  }

  // Sets "__metadata__"[key] = value (replacing an earlier value of `key`).
  void set_metadata(std::string key, std::string value);

  // The header (8-byte length + padded JSON) for the tensors added so far.
  [[nodiscard]] std::vector<std::byte> header_bytes() const;

  // Total file size save() would write.
  [[nodiscard]] uint64_t file_size() const;

  // Writes the file atomically (see write_file_atomically): on any failure
  // the previous content of `path` is untouched and tessera::Error names it.
  void save(const std::filesystem::path& path) const;

 private:
  struct Entry {
    TensorInfo info;
    const void* data = nullptr;
    std::vector<std::byte> owned;
  };
  void check_count(const std::string& name, const std::vector<uint64_t>& shape, size_t count) const;
  Entry& push(std::string name, tessera_dtype dtype, std::vector<uint64_t> shape);

  std::vector<Entry> entries_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
  uint64_t data_size_ = 0;
};

// A safetensors file opened for reading: the header is parsed and fully
// validated up front and the file is memory-mapped read-only, so data() is a
// view into the mapping (valid as long as the reader lives, even if the file
// is replaced on disk meanwhile). Move-only.
class SafetensorsReader {
 public:
  // Opens and validates `path`. Throws tessera::Error naming the file (and
  // the tensor, when one is at fault) if it cannot be opened or mapped, is
  // shorter than 8 bytes, declares a header longer than the file (or than
  // 100 MB), holds JSON that does not parse or is not an object, has a
  // tensor entry without a valid "dtype"/"shape"/"data_offsets", an unknown
  // dtype, offsets that are reversed, out of the data section, overlapping,
  // leaving gaps, or not equal to numel(shape) * element size, a duplicate
  // tensor name, or a "__metadata__" that is not an object of strings.
  static SafetensorsReader open(const std::filesystem::path& path);

  SafetensorsReader(SafetensorsReader&&) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept;
  ~SafetensorsReader();

  // The file this reader was opened on.
  [[nodiscard]] const std::filesystem::path& path() const noexcept;
  // Tensor names in data order (the order a Tessera writer added them).
  [[nodiscard]] const std::vector<std::string>& names() const noexcept;
  [[nodiscard]] bool contains(std::string_view name) const noexcept;
  // Description of tensor `name`; throws tessera::Error (invalid argument)
  // naming the file and the tensor if there is no such tensor.
  [[nodiscard]] const TensorInfo& info(std::string_view name) const;
  // The raw little-endian bytes of tensor `name` (throws like info()).
  [[nodiscard]] std::span<const std::byte> data(std::string_view name) const;
  // The "__metadata__" object (empty if the file has none).
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const noexcept;

  // Copies tensor `name` into `out`. Throws tessera::Error (mismatch) naming
  // the file and the tensor unless its dtype is dtype_of<T> and `out` holds
  // exactly numel elements.
  template <typename T>
  void read(std::string_view name, std::span<T> out) const {
    read_into(name, dtype_of<T>::value, out.data(), out.size());
  }
  void read_f32(std::string_view name, std::span<float> out) const { read(name, out); }

 private:
  struct Impl;
  explicit SafetensorsReader(std::unique_ptr<Impl> impl);
  void read_into(std::string_view name, tessera_dtype dtype, void* out, size_t count) const;

  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera

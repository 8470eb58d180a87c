// ShardedCheckpoint: assembles element ranges of tensors from rank files.
#include <algorithm>
#include <cstring>
#include <utility>

#include "tessera/core/safetensors_index.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {

namespace fs = std::filesystem;

struct ShardedCheckpoint::Impl {
  fs::path index_path;
  ShardedIndex index;
  std::map<std::string, SafetensorsReader> files;  // opened rank files by name

  const ShardedTensor& find(std::string_view name) const {
    const auto it = index.tensors.find(std::string(name));
    if (it == index.tensors.end()) {
      throw Error(
          TESSERA_ERR_INVALID_ARGUMENT,
          detail::concat("sharded index '", index_path.string(), "': no tensor '", name, "'"));
    }
    return it->second;
  }

  // The rank file `file`, opened and validated on first use.
  const SafetensorsReader& file(const std::string& file) {
    auto it = files.find(file);
    if (it == files.end()) {
      it = files.emplace(file, SafetensorsReader::open(index_path.parent_path() / file)).first;
    }
    return it->second;
  }
};

ShardedCheckpoint ShardedCheckpoint::open(const fs::path& index_path) {
  auto impl = std::make_unique<Impl>();
  impl->index_path = index_path;
  impl->index = read_index(index_path);
  return ShardedCheckpoint(std::move(impl));
}

ShardedCheckpoint::ShardedCheckpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardedCheckpoint::ShardedCheckpoint(ShardedCheckpoint&&) noexcept = default;
ShardedCheckpoint& ShardedCheckpoint::operator=(ShardedCheckpoint&&) noexcept = default;
ShardedCheckpoint::~ShardedCheckpoint() = default;

const ShardedIndex& ShardedCheckpoint::index() const noexcept { return impl_->index; }

const ShardedTensor& ShardedCheckpoint::tensor(std::string_view name) const {
  return impl_->find(name);
}

void ShardedCheckpoint::check_dtype(std::string_view name, tessera_dtype dtype) const {
  const ShardedTensor& t = impl_->find(name);
  if (t.dtype != dtype) {
    throw Error(TESSERA_ERR_MISMATCH,
                detail::concat("sharded index '", impl_->index_path.string(), "': tensor '", name,
                               "' is ", safetensors_dtype_name(t.dtype), ", not the requested ",
                               safetensors_dtype_name(dtype)));
  }
}

void ShardedCheckpoint::read_range(std::string_view name, uint64_t offset, uint64_t count,
                                   std::span<std::byte> out) {
  const ShardedTensor& t = impl_->find(name);
  const std::string where = impl_->index_path.string();
  const uint64_t numel = shape_numel(t.shape);
  const size_t elem = tessera_dtype_size(t.dtype);
  if (offset > numel || count > numel - offset) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("sharded index '", where, "': tensor '", name, "': range [", offset,
                               ", ", offset + count, ") runs past its ", numel, " elements"));
  }
  if (out.size() != count * elem) {
    throw Error(TESSERA_ERR_MISMATCH,
                detail::concat("sharded index '", where, "': tensor '", name, "': ", count,
                               " elements need ", count * elem, " bytes but the destination has ",
                               out.size()));
  }
  const uint64_t stop = offset + count;
  for (const ShardSlice& slice : t.slices) {
    const uint64_t lo = std::max(offset, slice.offset);
    const uint64_t hi = std::min(stop, slice.offset + slice.count);
    if (lo >= hi) continue;
    const SafetensorsReader& file = impl_->file(slice.file);
    const TensorInfo& info = file.info(slice.key);  // throws naming file and key
    if (info.dtype != t.dtype || info.numel() != slice.count) {
      throw Error(TESSERA_ERR_MISMATCH,
                  detail::concat("safetensors file '", file.path().string(), "': tensor '",
                                 slice.key, "' is ", safetensors_dtype_name(info.dtype), " with ",
                                 info.numel(), " elements but index '", where, "' expects ",
                                 safetensors_dtype_name(t.dtype), " with ", slice.count,
                                 " for tensor '", name, "'"));
    }
    const std::span<const std::byte> bytes = file.data(slice.key);
    std::memcpy(out.data() + (lo - offset) * elem, bytes.data() + (lo - slice.offset) * elem,
                static_cast<size_t>((hi - lo) * elem));
  }
}

std::vector<std::byte> ShardedCheckpoint::read_full(std::string_view name) {
  const ShardedTensor& t = impl_->find(name);
  const uint64_t numel = shape_numel(t.shape);
  std::vector<std::byte> bytes(static_cast<size_t>(numel * tessera_dtype_size(t.dtype)));
  read_range(name, 0, numel, bytes);
  return bytes;
}

}  // namespace tessera

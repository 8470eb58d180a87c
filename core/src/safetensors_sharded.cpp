// ShardedCheckpoint: assembles element ranges and boxes of tensors from rank
// files, whatever mix of flat and box slices they hold.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "tessera/core/safetensors_index.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {

struct ShardedCheckpoint::Impl {
  std::filesystem::path index_path;
  ShardedIndex index;
  std::map<std::string, SafetensorsReader> files;  // opened rank files by name
  // Per tensor, the layout of each slice (as in ShardedTensor::slices),
  // built on first read.
  std::map<std::string, std::vector<SliceLayout>, std::less<>> layouts;

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

  const std::vector<SliceLayout>& layouts_of(std::string_view name, const ShardedTensor& t) {
    auto it = layouts.find(name);
    if (it == layouts.end()) {
      std::vector<SliceLayout> all;
      all.reserve(t.slices.size());
      for (const ShardSlice& slice : t.slices) all.push_back(slice_layout(t.shape, slice));
      it = layouts.emplace(std::string(name), std::move(all)).first;
    }
    return it->second;
  }
};

ShardedCheckpoint ShardedCheckpoint::open(const std::filesystem::path& index_path) {
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
  const uint64_t numel = shape_numel(t.shape);
  if (offset > numel || count > numel - offset) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("sharded index '", impl_->index_path.string(), "': tensor '", name,
                               "': range ", range_text(offset, count), " runs past its ", numel,
                               " elements"));
  }
  read_into(name, t, SliceLayout::flat(t.shape, offset, count), out);
}

void ShardedCheckpoint::read_box(std::string_view name, const TensorBox& box,
                                 std::span<std::byte> out) {
  const ShardedTensor& t = impl_->find(name);
  const std::string problem = box_problem(box, t.shape);
  if (!problem.empty()) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("sharded index '", impl_->index_path.string(), "': tensor '", name,
                               "' of shape ", fmt::format("[{}]", fmt::join(t.shape, ", ")), ": ",
                               problem));
  }
  read_into(name, t, SliceLayout::of_box(t.shape, box), out);
}

void ShardedCheckpoint::read_into(std::string_view name, const ShardedTensor& t,
                                  const SliceLayout& want, std::span<std::byte> out) {
  const std::string where = impl_->index_path.string();
  const size_t elem = tessera_dtype_size(t.dtype);
  const uint64_t count = want.numel();
  if (out.size() != count * elem) {
    throw Error(TESSERA_ERR_MISMATCH,
                detail::concat("sharded index '", where, "': tensor '", name, "': ", count,
                               " elements need ", count * elem, " bytes but the destination has ",
                               out.size()));
  }
  const std::vector<SliceLayout>& layouts = impl_->layouts_of(name, t);
  for (size_t i = 0; i < t.slices.size(); ++i) {
    const ShardSlice& slice = t.slices[i];
    const SliceLayout& held = layouts[i];
    if (held.numel() == 0 || held.flat_end() <= want.flat_begin() ||
        want.flat_end() <= held.flat_begin()) {
      continue;
    }
    // The rank file is opened once the slice turns out to hold a wanted
    // element.
    const std::byte* from = nullptr;
    for_each_overlap(held, want, [&](uint64_t held_at, uint64_t want_at, uint64_t n) {
      if (from == nullptr) {
        const SafetensorsReader& file = impl_->file(slice.file);
        const TensorInfo& info = file.info(slice.key);  // throws naming file and key
        if (info.dtype != t.dtype || info.numel() != slice.count) {
          throw Error(TESSERA_ERR_MISMATCH,
                      detail::concat("safetensors file '", file.path().string(), "': tensor '",
                                     slice.key, "' is ", safetensors_dtype_name(info.dtype),
                                     " with ", info.numel(), " elements but index '", where,
                                     "' expects ", safetensors_dtype_name(t.dtype), " with ",
                                     slice.count, " for tensor '", name, "'"));
        }
        from = file.data(slice.key).data();
      }
      std::memcpy(out.data() + want_at * elem, from + held_at * elem,
                  static_cast<size_t>(n * elem));
    });
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

// Training state transfer on the host side (see strategy_host.hpp): the
// sources load() reads from (model init, a safetensors file), the state a
// strategy's save() collects, and the C reader/writer tables over them.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "host_call.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/train/strategy_host.hpp"

namespace tessera::train {
namespace {

std::string shape_text(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Elements of a tensor of `shape`; throws naming the tensor for a negative
// dimension or an overflow.
uint64_t checked_numel(const std::string& name, std::span<const int64_t> shape) {
  uint64_t n = 1;
  for (const int64_t d : shape) {
    TESSERA_CHECK(d >= 0, TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name, "' has shape ",
                  shape_text(shape), " with a negative dimension");
    const auto u = static_cast<uint64_t>(d);
    TESSERA_CHECK(u == 0 || n <= UINT64_MAX / u, TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name,
                  "' of shape ", shape_text(shape), " has too many elements");
    n *= u;
  }
  return n;
}

// Non-negative dimensions (checked by checked_numel) as unsigned.
std::vector<uint64_t> unsigned_dims(std::span<const int64_t> shape) {
  return {shape.begin(), shape.end()};
}

// Copies `slice` (checked) of a whole tensor of `bytes` (f32) into `out`.
void copy_from_whole(const SliceRef& slice, std::span<const std::byte> bytes,
                     std::span<float> out) {
  if (slice.count == 0) return;
  if (!slice.box) {
    std::memcpy(out.data(), bytes.data() + slice.offset * sizeof(float),
                slice.count * sizeof(float));
    return;
  }
  const std::vector<uint64_t> dims = unsigned_dims(slice.shape);
  copy_overlap(SliceLayout::whole(dims), bytes.data(), slice_layout(slice),
               reinterpret_cast<std::byte*>(out.data()), sizeof(float));
}

// ---- the model's own initialisation ----

class InitSource final : public StateSource {
 public:
  InitSource(const model::Model& model, uint64_t seed)
      : params_(model), describe_("model init (seed " + std::to_string(seed) + ")") {
    params_.init(model, seed);
    for (std::size_t u = 0; u < model.size(); ++u) {
      const auto specs = model.params(u);
      for (std::size_t p = 0; p < specs.size(); ++p) {
        if (!specs[p].tied_to.empty()) continue;  // reached through its owner's name
        tensors_.emplace(model.unit_name(u) + "." + specs[p].name,
                         Entry{model::ParamRef{u, p}, specs[p].shape});
      }
    }
  }

  [[nodiscard]] bool has(const std::string& name) const override {
    return tensors_.find(name) != tensors_.end();
  }

  void read(const SliceRef& slice, std::span<float> out) const override {
    const auto it = tensors_.find(slice.name);
    TESSERA_CHECK(it != tensors_.end(), TESSERA_ERR_INVALID_ARGUMENT, describe_, ": no tensor '",
                  slice.name, "' (it holds the model's parameters only)");
    check_slice_request(describe_, slice, it->second.shape, out.size());
    copy_from_whole(slice, std::as_bytes(params_.at(it->second.ref)), out);
  }

  [[nodiscard]] std::string describe() const override { return describe_; }

 private:
  struct Entry {
    model::ParamRef ref;
    std::vector<int64_t> shape;
  };
  model::ModelParams params_;
  std::map<std::string, Entry> tensors_;
  std::string describe_;
};

// ---- a full safetensors file ----

class SafetensorsSource final : public StateSource {
 public:
  explicit SafetensorsSource(const std::filesystem::path& file)
      : reader_(SafetensorsReader::open(file)), describe_(file.string()) {}

  [[nodiscard]] bool has(const std::string& name) const override { return reader_.contains(name); }

  void read(const SliceRef& slice, std::span<float> out) const override {
    TESSERA_CHECK(reader_.contains(slice.name), TESSERA_ERR_INVALID_ARGUMENT, describe_,
                  ": no tensor '", slice.name, "'");
    const TensorInfo& info = reader_.info(slice.name);
    TESSERA_CHECK(info.dtype == TESSERA_F32, TESSERA_ERR_INVALID_ARGUMENT, describe_, ": tensor '",
                  slice.name, "' is ", safetensors_dtype_name(info.dtype),
                  ", training state must be F32");
    std::vector<int64_t> shape;
    for (const uint64_t d : info.shape) {
      TESSERA_CHECK(d <= static_cast<uint64_t>(INT64_MAX), TESSERA_ERR_INVALID_ARGUMENT, describe_,
                    ": tensor '", slice.name, "' has a dimension too large");
      shape.push_back(static_cast<int64_t>(d));
    }
    check_slice_request(describe_, slice, shape, out.size());
    copy_from_whole(slice, reader_.data(slice.name), out);
  }

  [[nodiscard]] std::string describe() const override { return describe_; }

 private:
  SafetensorsReader reader_;
  std::string describe_;
};

// ---- CollectedState helpers ----

std::string who(int rank) {
  return rank >= 0 ? "rank " + std::to_string(rank) : "a rank (unknown)";
}

std::string value_text(float v) {
  return fmt::format("{} (bits 0x{:08x})", v, std::bit_cast<uint32_t>(v));
}

// The layout of a piece of a tensor of `dims` (checked by add).
SliceLayout piece_layout(std::span<const uint64_t> dims, const CollectedState::Piece& piece) {
  if (piece.box) return SliceLayout::of_box(dims, *piece.box);
  return SliceLayout::flat(dims, piece.offset, piece.values.size());
}

// The flat index of a non-empty piece's first element (its sort key).
uint64_t piece_first(std::span<const uint64_t> dims, const CollectedState::Piece& piece) {
  if (!piece.box) return piece.offset;
  uint64_t flat = 0;
  uint64_t stride = 1;
  for (std::size_t d = dims.size(); d-- > 0;) {
    flat += piece.box->offset[d] * stride;
    stride *= dims[d];
  }
  return flat;
}

// Throws when `held` and `piece` (laid out as `held_at` and `piece_at`)
// overlap with different bits (or at all, when !allow_repeat). Marks the
// elements of `piece` that `held` holds in `covered` (sized on first use).
void check_overlap(const std::string& name, const CollectedState::Piece& held,
                   const SliceLayout& held_at, const CollectedState::Piece& piece,
                   const SliceLayout& piece_at, bool allow_repeat, std::vector<char>& covered) {
  for_each_overlap(held_at, piece_at, [&](uint64_t h, uint64_t p, uint64_t n) {
    TESSERA_CHECK(allow_repeat, TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name,
                  "': ", overlap_text(held_at, piece_at), " written twice (by ", who(held.rank),
                  " and ", who(piece.rank), ") although each element must be written once");
    const float* a = held.values.data() + h;
    const float* b = piece.values.data() + p;
    if (std::memcmp(a, b, n * sizeof(float)) != 0) {
      std::size_t i = 0;
      while (std::bit_cast<uint32_t>(a[i]) == std::bit_cast<uint32_t>(b[i])) ++i;
      const uint64_t flat = piece_at.flat_index(p + i);
      const std::string at = piece_at.shape().size() > 1
                                 ? " (index " + index_text(piece_at.shape(), flat) + ")"
                                 : std::string();
      throw Error(
          TESSERA_ERR_MISMATCH,
          fmt::format("tensor '{}': replicas differ at element {}{}: {} holds {}, {} holds {}",
                      name, flat, at, who(held.rank), value_text(a[i]), who(piece.rank),
                      value_text(b[i])));
    }
    if (covered.empty()) covered.assign(piece.values.size(), 0);
    std::fill_n(covered.begin() + static_cast<std::ptrdiff_t>(p), n, char{1});
  });
}

// ---- the C tables ----

// A checked copy of what the plugin passed. The box fields are read when
// the caller's struct_size covers them.
SliceRef to_slice(const tessera_tensor_slice* slice) {
  constexpr std::size_t kFlatSize = offsetof(tessera_tensor_slice, box_offset);
  TESSERA_CHECK(slice != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "slice is NULL");
  TESSERA_CHECK(slice->struct_size >= kFlatSize, TESSERA_ERR_INVALID_ARGUMENT, "slice struct_size ",
                slice->struct_size, " is smaller than ", kFlatSize);
  TESSERA_CHECK(slice->name != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "slice has no name");
  TESSERA_CHECK(slice->ndim >= 0 && slice->ndim <= 64, TESSERA_ERR_INVALID_ARGUMENT, "tensor '",
                slice->name, "': ndim ", slice->ndim, " is invalid");
  TESSERA_CHECK(slice->shape != nullptr || slice->ndim == 0, TESSERA_ERR_INVALID_ARGUMENT,
                "tensor '", slice->name, "': shape is NULL");
  SliceRef ref;
  ref.name = slice->name;
  ref.shape.assign(slice->shape, slice->shape + slice->ndim);
  ref.offset = slice->offset;
  ref.count = slice->count;
  const bool has_box_fields = slice->struct_size >= sizeof(tessera_tensor_slice);
  if (!has_box_fields || (slice->box_offset == nullptr && slice->box_extent == nullptr)) {
    return ref;
  }
  TESSERA_CHECK((slice->box_offset != nullptr && slice->box_extent != nullptr) || slice->ndim == 0,
                TESSERA_ERR_INVALID_ARGUMENT, "tensor '", ref.name,
                "': box_offset and box_extent must both be set (a box) or both NULL (a flat "
                "slice)");
  TensorBox box;
  for (int32_t d = 0; d < slice->ndim; ++d) {
    TESSERA_CHECK(slice->box_offset[d] >= 0 && slice->box_extent[d] >= 0,
                  TESSERA_ERR_INVALID_ARGUMENT, "tensor '", ref.name, "': box dimension ", d,
                  " has offset ", slice->box_offset[d], " and extent ", slice->box_extent[d]);
    box.offset.push_back(static_cast<uint64_t>(slice->box_offset[d]));
    box.extent.push_back(static_cast<uint64_t>(slice->box_extent[d]));
  }
  (void)checked_numel(ref.name, ref.shape);
  const std::string problem = box_problem(box, unsigned_dims(ref.shape));
  TESSERA_CHECK(problem.empty(), TESSERA_ERR_INVALID_ARGUMENT, "tensor '", ref.name, "' of shape ",
                shape_text(ref.shape), ": ", problem);
  TESSERA_CHECK(ref.offset == 0 && ref.count == box.numel(), TESSERA_ERR_INVALID_ARGUMENT,
                "tensor '", ref.name, "': box ", box_text(box), " of ", box.numel(),
                " elements passed with offset ", ref.offset, " and count ", ref.count,
                " (a box slice has offset 0 and count its element count)");
  ref.box = std::move(box);
  return ref;
}

int32_t reader_has(void* ctx, const char* name) noexcept {
  if (ctx == nullptr || name == nullptr) return 0;
  try {
    return static_cast<const StateSource*>(ctx)->has(name) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

tessera_status reader_read(void* ctx, const tessera_tensor_slice* slice, float* out) noexcept {
  return detail::guard_host_call(
      [] { return std::string("state read"); },
      [&] {
        TESSERA_CHECK(ctx != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "reader has no source");
        const SliceRef ref = to_slice(slice);
        TESSERA_CHECK(out != nullptr || ref.count == 0, TESSERA_ERR_INVALID_ARGUMENT, "tensor '",
                      ref.name, "': output is NULL");
        const auto* source = static_cast<const StateSource*>(ctx);
        const std::span<float> values(out, static_cast<size_t>(ref.count));
        source->read(ref, values);
        // Training from a NaN or an infinity fails only at the first
        // gradient check, naming neither the file nor the tensor.
        const auto bad =
            std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
        TESSERA_CHECK(bad == values.end(), TESSERA_ERR_INVALID_ARGUMENT, source->describe(),
                      ": tensor '", ref.name, "' holds ", *bad, " (element ", bad - values.begin(),
                      " of the part read): the state is damaged, or was "
                      "written after training diverged");
      });
}

tessera_status write_slice(void* ctx, const tessera_tensor_slice* slice, const float* data,
                           bool allow_repeat) noexcept {
  return detail::guard_host_call(
      [] { return std::string("state write"); },
      [&] {
        TESSERA_CHECK(ctx != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "writer has no sink");
        const SliceRef ref = to_slice(slice);
        TESSERA_CHECK(data != nullptr || ref.count == 0, TESSERA_ERR_INVALID_ARGUMENT, "tensor '",
                      ref.name, "': data is NULL");
        CollectedState::Piece piece;
        piece.offset = ref.offset;
        piece.values.assign(data, data + ref.count);
        piece.rank = thread_rank();
        piece.box = ref.box;
        static_cast<CollectedState*>(ctx)->add(ref.name, ref.shape, std::move(piece), allow_repeat);
      });
}

tessera_status write_once(void* ctx, const tessera_tensor_slice* slice,
                          const float* data) noexcept {
  return write_slice(ctx, slice, data, false);
}

tessera_status write_replicas(void* ctx, const tessera_tensor_slice* slice,
                              const float* data) noexcept {
  return write_slice(ctx, slice, data, true);
}

}  // namespace

std::unique_ptr<StateSource> init_source(const model::Model& model, uint64_t seed) {
  return std::make_unique<InitSource>(model, seed);
}

std::unique_ptr<StateSource> safetensors_source(const std::filesystem::path& file) {
  return std::make_unique<SafetensorsSource>(file);
}

void check_slice_request(const std::string& source, const SliceRef& slice,
                         std::span<const int64_t> actual, std::size_t out_size) {
  TESSERA_CHECK(std::ranges::equal(slice.shape, actual), TESSERA_ERR_INVALID_ARGUMENT, source,
                ": tensor '", slice.name, "' has shape ", shape_text(actual),
                ", the strategy expects ", shape_text(slice.shape));
  const uint64_t numel = checked_numel(slice.name, actual);
  if (slice.box) {
    const std::string problem = box_problem(*slice.box, unsigned_dims(actual));
    TESSERA_CHECK(problem.empty(), TESSERA_ERR_INVALID_ARGUMENT, source, ": tensor '", slice.name,
                  "' of shape ", shape_text(actual), ": ", problem);
    TESSERA_CHECK(slice.offset == 0 && slice.count == slice.box->numel(),
                  TESSERA_ERR_INVALID_ARGUMENT, source, ": tensor '", slice.name, "': box ",
                  box_text(*slice.box), " of ", slice.box->numel(), " elements with offset ",
                  slice.offset, " and count ", slice.count);
  } else {
    TESSERA_CHECK(slice.offset <= numel && slice.count <= numel - slice.offset,
                  TESSERA_ERR_INVALID_ARGUMENT, source, ": elements [", slice.offset, ", ",
                  slice.offset + slice.count, ") are outside tensor '", slice.name, "' of ", numel,
                  " elements");
  }
  TESSERA_CHECK(out_size == slice.count, TESSERA_ERR_INVALID_ARGUMENT, source, ": tensor '",
                slice.name, "': ", slice.count, " elements requested into a buffer of ", out_size);
}

SliceLayout slice_layout(const SliceRef& slice) {
  const std::vector<uint64_t> dims = unsigned_dims(slice.shape);
  if (slice.box) return SliceLayout::of_box(dims, *slice.box);
  return SliceLayout::flat(dims, slice.offset, slice.count);
}

void CollectedState::add(const std::string& name, std::span<const int64_t> shape, Piece piece,
                         bool allow_repeat) {
  const uint64_t numel = checked_numel(name, shape);
  const std::vector<uint64_t> dims = unsigned_dims(shape);
  const uint64_t count = piece.values.size();
  if (piece.box) {
    const std::string problem = box_problem(*piece.box, dims);
    TESSERA_CHECK(problem.empty(), TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name, "' of shape ",
                  shape_text(shape), ": ", problem);
    TESSERA_CHECK(count == piece.box->numel(), TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name,
                  "': box ", box_text(*piece.box), " holds ", piece.box->numel(),
                  " elements, the piece ", count, " values");
    piece.offset = 0;
  } else {
    TESSERA_CHECK(piece.offset <= numel && count <= numel - piece.offset,
                  TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name, "' of shape ", shape_text(shape),
                  ": elements [", piece.offset, ", ", piece.offset + count, ") are outside its ",
                  numel, " elements");
  }
  auto [it, inserted] = tensors.try_emplace(name);
  Tensor& tensor = it->second;
  if (inserted) {
    tensor.shape.assign(shape.begin(), shape.end());
  } else {
    TESSERA_CHECK(std::ranges::equal(tensor.shape, shape), TESSERA_ERR_MISMATCH, "tensor '", name,
                  "' written with shape ", shape_text(shape), " after shape ",
                  shape_text(tensor.shape));
  }
  if (count == 0) return;
  const SliceLayout mine = piece_layout(dims, piece);
  std::vector<char> covered;  // elements of `piece` already held, once one is
  for (const Piece& held : tensor.pieces) {
    // A flat piece away from this one's span needs no layout.
    if (!held.box &&
        (held.offset >= mine.flat_end() || held.offset + held.values.size() <= mine.flat_begin())) {
      continue;
    }
    check_overlap(name, held, piece_layout(dims, held), piece, mine, allow_repeat, covered);
  }
  if (!covered.empty() && std::find(covered.begin(), covered.end(), char{0}) == covered.end()) {
    return;  // a replica
  }
  const uint64_t first = mine.flat_begin();
  const auto pos =
      std::upper_bound(tensor.pieces.begin(), tensor.pieces.end(), first,
                       [&](uint64_t at, const Piece& p) { return at < piece_first(dims, p); });
  tensor.pieces.insert(pos, std::move(piece));
}

std::vector<float> CollectedState::full(const std::string& name) const {
  const auto it = tensors.find(name);
  TESSERA_CHECK(it != tensors.end(), TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name,
                "' was not saved (", tensors.size(), " tensors were)");
  const Tensor& tensor = it->second;
  const uint64_t numel = checked_numel(name, tensor.shape);
  const std::vector<uint64_t> dims = unsigned_dims(tensor.shape);
  const SliceLayout whole = SliceLayout::whole(dims);
  std::vector<float> out(numel);
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  for (const Piece& p : tensor.pieces) {
    for_each_overlap(piece_layout(dims, p), whole, [&](uint64_t from, uint64_t to, uint64_t n) {
      std::copy_n(p.values.begin() + static_cast<std::ptrdiff_t>(from), n,
                  out.begin() + static_cast<std::ptrdiff_t>(to));
      runs.emplace_back(to, n);
    });
  }
  const auto gap = first_gap(runs, numel);
  if (gap) {
    const std::string at = dims.size() > 1
                               ? " (the first at index " + index_text(dims, gap->first) + ")"
                               : std::string();
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                fmt::format("tensor '{}' of shape {}: elements [{}, {}) were not saved{}", name,
                            shape_text(tensor.shape), gap->first, gap->second, at));
  }
  return out;
}

void CollectedState::merge(CollectedState&& other) {
  for (auto& [name, tensor] : other.tensors) {
    if (tensor.pieces.empty()) {
      add(name, tensor.shape, Piece{});
      continue;
    }
    for (Piece& piece : tensor.pieces) add(name, tensor.shape, std::move(piece));
  }
  other.tensors.clear();
}

tessera_state_reader make_reader(const StateSource& source) noexcept {
  tessera_state_reader reader{};
  reader.struct_size = sizeof reader;
  reader.ctx = const_cast<StateSource*>(&source);  // NOLINT: the C ctx is untyped
  reader.has = &reader_has;
  reader.read = &reader_read;
  return reader;
}

tessera_state_writer make_writer(CollectedState& sink, uint32_t flags, int64_t step) noexcept {
  tessera_state_writer writer{};
  writer.struct_size = sizeof writer;
  writer.flags = flags;
  writer.step = step;
  writer.ctx = &sink;
  // The flag picks the function, so the untyped ctx needs nothing but the sink.
  writer.write = (flags & TESSERA_STATE_ALL_REPLICAS) != 0 ? &write_replicas : &write_once;
  return writer;
}

}  // namespace tessera::train

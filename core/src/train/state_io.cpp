// Training state transfer on the host side (see strategy_host.hpp): the
// sources load() reads from (model init, a safetensors file), the state a
// strategy's save() collects, and the C reader/writer tables over them.
#include <algorithm>
#include <bit>
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

// Checks a slice a strategy asks `source` for against the tensor's real
// shape and the output length.
void check_slice(const std::string& source, const SliceRef& slice, std::span<const int64_t> actual,
                 std::size_t out_size) {
  TESSERA_CHECK(std::ranges::equal(slice.shape, actual), TESSERA_ERR_INVALID_ARGUMENT, source,
                ": tensor '", slice.name, "' has shape ", shape_text(actual),
                ", the strategy expects ", shape_text(slice.shape));
  const uint64_t numel = checked_numel(slice.name, actual);
  TESSERA_CHECK(slice.offset <= numel && slice.count <= numel - slice.offset,
                TESSERA_ERR_INVALID_ARGUMENT, source, ": elements [", slice.offset, ", ",
                slice.offset + slice.count, ") are outside tensor '", slice.name, "' of ", numel,
                " elements");
  TESSERA_CHECK(out_size == slice.count, TESSERA_ERR_INVALID_ARGUMENT, source, ": tensor '",
                slice.name, "': ", slice.count, " elements requested into a buffer of ", out_size);
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
    check_slice(describe_, slice, it->second.shape, out.size());
    const auto values = params_.at(it->second.ref).subspan(slice.offset, slice.count);
    std::copy(values.begin(), values.end(), out.begin());
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
    check_slice(describe_, slice, shape, out.size());
    const std::span<const std::byte> bytes = reader_.data(slice.name);
    if (slice.count > 0) {
      std::memcpy(out.data(), bytes.data() + slice.offset * sizeof(float),
                  slice.count * sizeof(float));
    }
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

// Throws when `held` and `piece` overlap with different bits (or at all,
// when !allow_repeat).
void check_overlap(const std::string& name, const CollectedState::Piece& held,
                   const CollectedState::Piece& piece, bool allow_repeat) {
  const uint64_t begin = std::max(held.offset, piece.offset);
  const uint64_t end =
      std::min(held.offset + held.values.size(), piece.offset + piece.values.size());
  if (begin >= end) return;
  TESSERA_CHECK(allow_repeat, TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name, "': elements [",
                begin, ", ", end, ") written twice (by ", who(held.rank), " and ", who(piece.rank),
                ") although each element must be written once");
  const float* a = held.values.data() + (begin - held.offset);
  const float* b = piece.values.data() + (begin - piece.offset);
  const std::size_t n = end - begin;
  if (std::memcmp(a, b, n * sizeof(float)) == 0) return;
  std::size_t i = 0;
  while (std::bit_cast<uint32_t>(a[i]) == std::bit_cast<uint32_t>(b[i])) ++i;
  throw Error(
      TESSERA_ERR_MISMATCH,
      fmt::format("tensor '{}': replicas differ at element {}: {} holds {}, {} holds {}", name,
                  begin + i, who(held.rank), value_text(a[i]), who(piece.rank), value_text(b[i])));
}

// Whether [begin, end) lies inside the union of `pieces`.
bool covered(const std::vector<CollectedState::Piece>& pieces, uint64_t begin, uint64_t end) {
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& p : pieces) {
    const uint64_t p_end = p.offset + p.values.size();
    if (p.offset < end && p_end > begin) spans.emplace_back(p.offset, p_end);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t reached = begin;
  for (const auto& [b, e] : spans) {
    if (b > reached) return false;
    reached = std::max(reached, e);
    if (reached >= end) return true;
  }
  return reached >= end;
}

// ---- the C tables ----

// A checked copy of what the plugin passed.
SliceRef to_slice(const tessera_tensor_slice* slice) {
  TESSERA_CHECK(slice != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "slice is NULL");
  TESSERA_CHECK(slice->struct_size >= sizeof(tessera_tensor_slice), TESSERA_ERR_INVALID_ARGUMENT,
                "slice struct_size ", slice->struct_size, " is smaller than ",
                sizeof(tessera_tensor_slice));
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
        static_cast<const StateSource*>(ctx)->read(
            ref, std::span<float>(out, static_cast<size_t>(ref.count)));
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

void CollectedState::add(const std::string& name, std::span<const int64_t> shape, Piece piece,
                         bool allow_repeat) {
  const uint64_t numel = checked_numel(name, shape);
  const uint64_t count = piece.values.size();
  TESSERA_CHECK(piece.offset <= numel && count <= numel - piece.offset,
                TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name, "' of shape ", shape_text(shape),
                ": elements [", piece.offset, ", ", piece.offset + count, ") are outside its ",
                numel, " elements");
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
  for (const Piece& held : tensor.pieces) check_overlap(name, held, piece, allow_repeat);
  if (covered(tensor.pieces, piece.offset, piece.offset + count)) return;  // a replica
  const auto pos =
      std::upper_bound(tensor.pieces.begin(), tensor.pieces.end(), piece.offset,
                       [](uint64_t offset, const Piece& p) { return offset < p.offset; });
  tensor.pieces.insert(pos, std::move(piece));
}

std::vector<float> CollectedState::full(const std::string& name) const {
  const auto it = tensors.find(name);
  TESSERA_CHECK(it != tensors.end(), TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name,
                "' was not saved (", tensors.size(), " tensors were)");
  const Tensor& tensor = it->second;
  const uint64_t numel = checked_numel(name, tensor.shape);
  std::vector<float> out(numel);
  uint64_t reached = 0;
  for (const Piece& p : tensor.pieces) {  // sorted by offset
    TESSERA_CHECK(p.offset <= reached, TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name,
                  "' of shape ", shape_text(tensor.shape), ": elements [", reached, ", ", p.offset,
                  ") were not saved");
    std::copy(p.values.begin(), p.values.end(),
              out.begin() + static_cast<std::ptrdiff_t>(p.offset));
    reached = std::max<uint64_t>(reached, p.offset + p.values.size());
  }
  TESSERA_CHECK(reached == numel, TESSERA_ERR_INVALID_ARGUMENT, "tensor '", name, "' of shape ",
                shape_text(tensor.shape), ": elements [", reached, ", ", numel, ") were not saved");
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

// The sharded-checkpoint index: validation, JSON writing and reading.
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <utility>

#include "tessera/core/atomic_file.hpp"
#include "tessera/core/input_file.hpp"
#include "tessera/core/safetensors_index.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

using Json = nlohmann::ordered_json;

// An index lists a few slices per tensor and rank; far below this even for
// thousands of ranks.
constexpr uint64_t kMaxIndexBytes = uint64_t{256} << 20;

// Builds "sharded index '<where>'[: tensor '<name>']: <what>".
template <typename... Args>
Error index_error(std::string_view where, std::string_view tensor, Args&&... what) {
  std::string prefix = detail::concat("sharded index '", where, "'");
  if (!tensor.empty()) prefix += detail::concat(": tensor '", tensor, "'");
  return Error(TESSERA_ERR_INVALID_ARGUMENT,
               detail::concat(prefix, ": ", std::forward<Args>(what)...));
}

// A slice file must stay inside the checkpoint directory.
bool is_safe_relative(const std::string& file) {
  if (file.empty()) return false;
  const std::filesystem::path p(file);
  if (p.is_absolute() || !p.has_filename()) return false;
  return std::none_of(p.begin(), p.end(),
                      [](const std::filesystem::path& part) { return part == ".."; });
}

// Reads a required field of `object`, or throws naming it.
const Json& field(const Json& object, const char* key, std::string_view where,
                  std::string_view tensor) {
  const auto it = object.find(key);
  if (it == object.end()) throw index_error(where, tensor, "missing field \"", key, "\"");
  return *it;
}

uint64_t to_u64(const Json& value, const char* key, std::string_view where,
                std::string_view tensor) {
  if (!value.is_number_unsigned()) {
    throw index_error(where, tensor, "\"", key, "\" must be a non-negative integer, got ",
                      value.dump());
  }
  return value.get<uint64_t>();
}

std::string to_string(const Json& value, const char* key, std::string_view where,
                      std::string_view tensor) {
  if (!value.is_string()) {
    throw index_error(where, tensor, "\"", key, "\" must be a string, got ", value.dump());
  }
  return value.get<std::string>();
}

// A JSON array of non-negative integers.
std::vector<uint64_t> to_u64_array(const Json& value, const char* key, std::string_view where,
                                   std::string_view tensor) {
  if (!value.is_array()) throw index_error(where, tensor, "\"", key, "\" is not an array");
  std::vector<uint64_t> out;
  for (const Json& v : value) out.push_back(to_u64(v, key, where, tensor));
  return out;
}

// A slice entry: flat ("offset", "count") or, from version 2, a box
// ("box_offset", "box_extent"; its count is the box's element count).
ShardSlice parse_slice(const Json& s, int version, const std::string& name,
                       std::string_view where) {
  if (!s.is_object()) throw index_error(where, name, "a slice is not a JSON object");
  ShardSlice slice;
  slice.file = to_string(field(s, "file", where, name), "file", where, name);
  slice.key = to_string(field(s, "key", where, name), "key", where, name);
  const bool boxed = s.contains("box_offset") || s.contains("box_extent");
  if (!boxed) {
    slice.offset = to_u64(field(s, "offset", where, name), "offset", where, name);
    slice.count = to_u64(field(s, "count", where, name), "count", where, name);
    return slice;
  }
  if (version < 2) {
    throw index_error(where, name, "slice \"", slice.key, "\" is a box, which index version ",
                      version, " cannot hold (boxes need version 2)");
  }
  if (s.contains("offset") || s.contains("count")) {
    throw index_error(where, name, "slice \"", slice.key,
                      "\" has both a flat range (\"offset\", \"count\") and a box");
  }
  TensorBox box;
  box.offset = to_u64_array(field(s, "box_offset", where, name), "box_offset", where, name);
  box.extent = to_u64_array(field(s, "box_extent", where, name), "box_extent", where, name);
  uint64_t count = 1;
  for (const uint64_t e : box.extent) {
    if (e != 0 && count > UINT64_MAX / e) {
      throw index_error(where, name, "box ", box_text(box), " of slice \"", slice.key,
                        "\" has too many elements");
    }
    count *= e;
  }
  slice.count = count;
  slice.box = std::move(box);
  return slice;
}

// "slice [4, 11) in \"rank00001.safetensors\"" / "slice [0:2, 3:5] in ...".
std::string slice_text(const ShardSlice& slice) {
  return detail::concat("slice ",
                        slice.box ? box_text(*slice.box) : range_text(slice.offset, slice.count),
                        " in \"", slice.file, "\"");
}

// The checks of validate_index on one slice of tensor `name`: inside the
// tensor, a box with its element count.
void check_slice_bounds(const ShardSlice& slice, const std::vector<uint64_t>& shape, uint64_t numel,
                        std::string_view where, const std::string& name) {
  if (!slice.box) {
    if (slice.offset > numel || slice.count > numel - slice.offset) {
      throw index_error(where, name, slice_text(slice), " runs past the ", numel,
                        " elements of the tensor");
    }
    return;
  }
  const std::string problem = box_problem(*slice.box, shape);
  if (!problem.empty()) throw index_error(where, name, slice_text(slice), ": ", problem);
  if (slice.offset != 0 || slice.count != slice.box->numel()) {
    throw index_error(where, name, slice_text(slice), " has offset ", slice.offset, " and count ",
                      slice.count, ", a box slice offset 0 and count ", slice.box->numel());
  }
}

// The slices of tensor `name` cover each of its `numel` elements once.
// Every part (a box, see SliceLayout) of every slice is compared with the
// parts whose flat span meets its own; then the element counts add up
// exactly when nothing is missing.
void check_cover(const ShardedTensor& tensor, uint64_t numel, std::string_view where,
                 const std::string& name) {
  std::vector<SliceLayout> layouts;
  layouts.reserve(tensor.slices.size());
  for (const ShardSlice& slice : tensor.slices) {
    layouts.push_back(slice_layout(tensor.shape, slice));
  }
  struct Span {
    size_t slice;
    const SliceLayout::Part* part;
    uint64_t begin;
    uint64_t end;
  };
  std::vector<Span> spans;
  for (size_t i = 0; i < layouts.size(); ++i) {
    for (const SliceLayout::Part& part : layouts[i].parts()) {
      const SliceLayout one = SliceLayout::of_box(tensor.shape, part.box);
      spans.push_back({i, &part, one.flat_begin(), one.flat_end()});
    }
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < spans.size(); ++i) {
    for (size_t j = i + 1; j < spans.size() && spans[j].begin < spans[i].end; ++j) {
      if (spans[i].slice == spans[j].slice) continue;
      const TensorBox& a = spans[i].part->box;
      const TensorBox& b = spans[j].part->box;
      bool meet = true;
      for (size_t d = 0; d < a.ndim() && meet; ++d) {
        meet = std::max(a.offset[d], b.offset[d]) <
               std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d]);
      }
      if (!meet) continue;
      const ShardSlice& first = tensor.slices[std::min(spans[i].slice, spans[j].slice)];
      const ShardSlice& second = tensor.slices[std::max(spans[i].slice, spans[j].slice)];
      throw index_error(where, name, slice_text(first), " and ", slice_text(second), " overlap in ",
                        overlap_text(layouts[std::min(spans[i].slice, spans[j].slice)],
                                     layouts[std::max(spans[i].slice, spans[j].slice)]));
    }
  }
  uint64_t held = 0;
  for (const ShardSlice& slice : tensor.slices) held += slice.count;  // disjoint: <= numel
  if (held == numel) return;
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  for (const SliceLayout& layout : layouts) {
    for (const auto& run : flat_runs(layout)) runs.push_back(run);
  }
  const auto gap = first_gap(runs, numel);
  const uint64_t begin = gap ? gap->first : 0;
  const uint64_t end = gap ? gap->second : numel;
  std::string first_index;
  if (tensor.shape.size() > 1)
    first_index = " (the first at index " + index_text(tensor.shape, begin) + ")";
  throw index_error(where, name, "elements [", begin, ", ", end, ") are in no slice", first_index);
}

ShardedTensor parse_tensor(const std::string& name, const Json& entry, int version,
                           std::string_view where) {
  if (!entry.is_object()) throw index_error(where, name, "entry is not a JSON object");
  ShardedTensor tensor;
  const std::string dtype = to_string(field(entry, "dtype", where, name), "dtype", where, name);
  const auto parsed = parse_safetensors_dtype(dtype);
  if (!parsed) throw index_error(where, name, "unknown dtype \"", dtype, "\"");
  tensor.dtype = *parsed;
  const Json& shape = field(entry, "shape", where, name);
  if (!shape.is_array()) throw index_error(where, name, "\"shape\" is not an array");
  for (const Json& dim : shape) tensor.shape.push_back(to_u64(dim, "shape", where, name));
  const Json& slices = field(entry, "slices", where, name);
  if (!slices.is_array()) throw index_error(where, name, "\"slices\" is not an array");
  for (const Json& s : slices) tensor.slices.push_back(parse_slice(s, version, name, where));
  return tensor;
}

}  // namespace

SliceLayout slice_layout(std::span<const uint64_t> shape, const ShardSlice& slice) {
  if (slice.box) return SliceLayout::of_box(shape, *slice.box);
  return SliceLayout::flat(shape, slice.offset, slice.count);
}

ElementRange even_shard(uint64_t numel, int world_size, int rank) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("even_shard: rank ", rank, " is not in a world of ", world_size));
  }
  const auto ranks = static_cast<uint64_t>(world_size);
  const auto r = static_cast<uint64_t>(rank);
  const uint64_t base = numel / ranks;
  const uint64_t extra = numel % ranks;
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

std::string shard_file_name(int rank) {
  char name[48];
  std::snprintf(name, sizeof name, "rank%05d.safetensors", rank);
  return name;
}

void validate_index(const ShardedIndex& index, std::string_view where) {
  if (index.world_size < 1) {
    throw index_error(where, "", "world_size must be at least 1, got ", index.world_size);
  }
  for (const auto& [name, tensor] : index.tensors) {
    if (name.empty()) throw index_error(where, "", "a tensor has an empty name");
    if (tensor.dtype < 0 || tensor.dtype >= TESSERA_DTYPE_COUNT) {
      throw index_error(where, name, "unknown dtype value ", tensor.dtype);
    }
    uint64_t numel = 0;
    try {
      numel = shape_numel(tensor.shape);
    } catch (const Error&) {
      throw index_error(where, name, "shape overflows 64 bits");
    }
    for (const ShardSlice& slice : tensor.slices) {
      if (!is_safe_relative(slice.file)) {
        throw index_error(where, name, "slice file \"", slice.file,
                          "\" is not a relative path inside the checkpoint directory");
      }
      if (slice.key.empty()) throw index_error(where, name, "a slice has an empty key");
      check_slice_bounds(slice, tensor.shape, numel, where, name);
    }
    check_cover(tensor, numel, where, name);
  }
}

void write_index(const std::filesystem::path& path, const ShardedIndex& index) {
  validate_index(index, path.string());
  Json root = Json::object();
  root["version"] = kShardedIndexVersion;
  root["metadata"] = Json::object();
  for (const auto& [key, value] : index.metadata) root["metadata"][key] = value;
  root["world_size"] = index.world_size;
  Json tensors = Json::object();
  for (const auto& [name, tensor] : index.tensors) {
    Json slices = Json::array();
    for (const ShardSlice& s : tensor.slices) {
      if (s.box) {
        slices.push_back({{"file", s.file},
                          {"key", s.key},
                          {"box_offset", s.box->offset},
                          {"box_extent", s.box->extent}});
      } else {
        slices.push_back(
            {{"file", s.file}, {"key", s.key}, {"offset", s.offset}, {"count", s.count}});
      }
    }
    tensors[name] = {{"dtype", safetensors_dtype_name(tensor.dtype)},
                     {"shape", tensor.shape},
                     {"slices", std::move(slices)}};
  }
  root["tensors"] = std::move(tensors);
  std::string text;
  try {
    text = root.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    throw index_error(path.string(), "", "a name or metadata entry is not valid UTF-8: ", e.what());
  }
  write_file_atomically(path, std::string_view(text));
}

ShardedIndex read_index(const std::filesystem::path& path) {
  const std::string where = path.string();
  const std::string text = read_input_file(path, "sharded index", kMaxIndexBytes);
  Json root;
  try {
    root = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw index_error(where, "", "not valid JSON: ", e.what());
  }
  if (!root.is_object()) throw index_error(where, "", "not a JSON object");
  ShardedIndex index;
  index.version = 1;
  if (const auto version = root.find("version"); version != root.end()) {
    if (!version->is_number_unsigned() || version->get<uint64_t>() < 1) {
      throw index_error(where, "", "\"version\" must be a positive integer, got ", version->dump());
    }
    if (version->get<uint64_t>() > static_cast<uint64_t>(kShardedIndexVersion)) {
      throw index_error(where, "", "index version ", version->get<uint64_t>(),
                        " is newer than this build reads (up to ", kShardedIndexVersion, ")");
    }
    index.version = static_cast<int>(version->get<uint64_t>());
  }
  if (const auto meta = root.find("metadata"); meta != root.end()) {
    if (!meta->is_object()) throw index_error(where, "", "\"metadata\" is not a JSON object");
    for (const auto& [key, value] : meta->items()) {
      index.metadata[key] = to_string(value, "metadata", where, "");
    }
  }
  const Json& world = field(root, "world_size", where, "");
  if (!world.is_number_integer()) throw index_error(where, "", "\"world_size\" is not an integer");
  const auto world_size = world.get<int64_t>();
  if (world_size < 1 || world_size > (int64_t{1} << 30)) {
    throw index_error(where, "", "world_size ", world_size, " is out of range");
  }
  index.world_size = static_cast<int>(world_size);
  const Json& tensors = field(root, "tensors", where, "");
  if (!tensors.is_object()) throw index_error(where, "", "\"tensors\" is not a JSON object");
  for (const auto& [name, entry] : tensors.items()) {
    index.tensors.emplace(name, parse_tensor(name, entry, index.version, where));
  }
  validate_index(index, where);

  const std::filesystem::path dir = path.parent_path();
  std::set<std::string> checked;
  for (const auto& [name, tensor] : index.tensors) {
    for (const ShardSlice& slice : tensor.slices) {
      if (!checked.insert(slice.file).second) continue;
      const std::string problem = regular_file_problem(dir / slice.file);
      if (!problem.empty()) {
        throw index_error(where, name, "slice file \"", (dir / slice.file).string(), "\" ",
                          problem);
      }
    }
  }
  return index;
}

}  // namespace tessera

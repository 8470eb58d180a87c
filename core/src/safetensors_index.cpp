// The sharded-checkpoint index: validation, JSON writing and reading.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <utility>

#include "tessera/core/atomic_file.hpp"
#include "tessera/core/safetensors_index.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

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
  const fs::path p(file);
  if (p.is_absolute() || !p.has_filename()) return false;
  return std::none_of(p.begin(), p.end(), [](const fs::path& part) { return part == ".."; });
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

ShardedTensor parse_tensor(const std::string& name, const Json& entry, std::string_view where) {
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
  for (const Json& s : slices) {
    if (!s.is_object()) throw index_error(where, name, "a slice is not a JSON object");
    ShardSlice slice;
    slice.file = to_string(field(s, "file", where, name), "file", where, name);
    slice.key = to_string(field(s, "key", where, name), "key", where, name);
    slice.offset = to_u64(field(s, "offset", where, name), "offset", where, name);
    slice.count = to_u64(field(s, "count", where, name), "count", where, name);
    tensor.slices.push_back(std::move(slice));
  }
  return tensor;
}

}  // namespace

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
    std::vector<const ShardSlice*> sorted;
    for (const ShardSlice& slice : tensor.slices) {
      if (!is_safe_relative(slice.file)) {
        throw index_error(where, name, "slice file \"", slice.file,
                          "\" is not a relative path inside the checkpoint directory");
      }
      if (slice.key.empty()) throw index_error(where, name, "a slice has an empty key");
      if (slice.count != 0) sorted.push_back(&slice);
    }
    std::sort(sorted.begin(), sorted.end(),
              [](const ShardSlice* a, const ShardSlice* b) { return a->offset < b->offset; });
    uint64_t position = 0;
    for (const ShardSlice* slice : sorted) {
      if (slice->offset < position) {
        throw index_error(where, name, "slice at offset ", slice->offset, " in \"", slice->file,
                          "\" overlaps elements already covered up to ", position);
      }
      if (slice->offset > position) {
        throw index_error(where, name, "elements [", position, ", ", slice->offset,
                          ") are in no slice");
      }
      if (slice->count > numel - position) {
        throw index_error(where, name, "slice at offset ", slice->offset, " with ", slice->count,
                          " elements in \"", slice->file, "\" runs past the ", numel,
                          " elements of the tensor");
      }
      position += slice->count;
    }
    if (position != numel) {
      throw index_error(where, name, "elements [", position, ", ", numel, ") are in no slice");
    }
  }
}

void write_index(const fs::path& path, const ShardedIndex& index) {
  validate_index(index, path.string());
  Json root = Json::object();
  root["metadata"] = Json::object();
  for (const auto& [key, value] : index.metadata) root["metadata"][key] = value;
  root["world_size"] = index.world_size;
  Json tensors = Json::object();
  for (const auto& [name, tensor] : index.tensors) {
    Json slices = Json::array();
    for (const ShardSlice& s : tensor.slices) {
      slices.push_back(
          {{"file", s.file}, {"key", s.key}, {"offset", s.offset}, {"count", s.count}});
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

ShardedIndex read_index(const fs::path& path) {
  const std::string where = path.string();
  std::string text;
  {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) throw index_error(where, "", "cannot open: ", std::strerror(errno));
    char buffer[65536];
    size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
    const bool failed = std::ferror(file) != 0;
    std::fclose(file);
    if (failed) throw index_error(where, "", "read error");
  }
  Json root;
  try {
    root = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw index_error(where, "", "not valid JSON: ", e.what());
  }
  if (!root.is_object()) throw index_error(where, "", "not a JSON object");
  ShardedIndex index;
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
    index.tensors.emplace(name, parse_tensor(name, entry, where));
  }
  validate_index(index, where);

  const fs::path dir = path.parent_path();
  std::set<std::string> checked;
  for (const auto& [name, tensor] : index.tensors) {
    for (const ShardSlice& slice : tensor.slices) {
      if (!checked.insert(slice.file).second) continue;
      std::error_code ec;
      if (!fs::is_regular_file(dir / slice.file, ec)) {
        throw index_error(where, name, "slice file \"", (dir / slice.file).string(),
                          "\" does not exist");
      }
    }
  }
  return index;
}

}  // namespace tessera

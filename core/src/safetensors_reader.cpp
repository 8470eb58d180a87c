// SafetensorsReader: maps a file read-only and validates its header before
// handing out any tensor.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "tessera/core/input_file.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

using Json = nlohmann::ordered_json;

// Upper bound on the JSON header, as other safetensors readers enforce.
constexpr uint64_t kMaxHeaderBytes = 100ULL * 1024 * 1024;

// Builds "safetensors file '<path>'[: tensor '<name>']: <what>".
template <typename... Args>
Error file_error(tessera_status status, const std::filesystem::path& path, std::string_view tensor,
                 Args&&... what) {
  std::string prefix = detail::concat("safetensors file '", path.string(), "'");
  if (!tensor.empty()) prefix += detail::concat(": tensor '", tensor, "'");
  return Error(status, detail::concat(prefix, ": ", std::forward<Args>(what)...));
}

// Reads one u64 from a JSON value, or throws naming the field.
uint64_t to_u64(const Json& value, const std::filesystem::path& path, std::string_view tensor,
                std::string_view field) {
  if (!value.is_number_unsigned()) {
    throw file_error(TESSERA_ERR_INVALID_ARGUMENT, path, tensor, "\"", field,
                     "\" must hold non-negative integers, got ", value.dump());
  }
  return value.get<uint64_t>();
}

// Parses one tensor entry of the header (without checking its neighbours).
TensorInfo parse_entry(const std::string& name, const Json& entry,
                       const std::filesystem::path& path, uint64_t data_size) {
  constexpr auto kInvalid = TESSERA_ERR_INVALID_ARGUMENT;
  if (!entry.is_object()) throw file_error(kInvalid, path, name, "entry is not a JSON object");
  TensorInfo info;
  info.name = name;
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) {
    throw file_error(kInvalid, path, name, "missing string field \"dtype\"");
  }
  const auto parsed = parse_safetensors_dtype(dtype->get_ref<const std::string&>());
  if (!parsed) throw file_error(kInvalid, path, name, "unknown dtype ", dtype->dump());
  info.dtype = *parsed;
  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) {
    throw file_error(kInvalid, path, name, "missing array field \"shape\"");
  }
  for (const Json& dim : *shape) info.shape.push_back(to_u64(dim, path, name, "shape"));
  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
    throw file_error(kInvalid, path, name, "missing field \"data_offsets\" of two integers");
  }
  info.begin = to_u64((*offsets)[0], path, name, "data_offsets");
  info.end = to_u64((*offsets)[1], path, name, "data_offsets");
  if (info.begin > info.end) {
    throw file_error(kInvalid, path, name, "data_offsets [", info.begin, ", ", info.end,
                     "] are reversed");
  }
  if (info.end > data_size) {
    throw file_error(kInvalid, path, name, "data_offsets [", info.begin, ", ", info.end,
                     "] run past the data section of ", data_size, " bytes");
  }
  uint64_t expected = 0;
  uint64_t numel = 0;
  try {
    numel = info.numel();
  } catch (const Error&) {
    throw file_error(kInvalid, path, name, "shape ", shape->dump(), " overflows 64 bits");
  }
  if (__builtin_mul_overflow(numel, tessera_dtype_size(info.dtype), &expected) ||
      expected != info.nbytes()) {
    throw file_error(kInvalid, path, name, "data_offsets [", info.begin, ", ", info.end, "] span ",
                     info.nbytes(), " bytes but ", dtype->get<std::string>(), " with shape ",
                     shape->dump(), " needs ", numel, " x ", tessera_dtype_size(info.dtype),
                     " bytes");
  }
  return info;
}

}  // namespace

struct SafetensorsReader::Impl {
  std::filesystem::path path;
  const std::byte* map = nullptr;  // whole file, read-only
  size_t map_size = 0;
  const std::byte* data = nullptr;  // start of the data section
  std::vector<TensorInfo> tensors;  // in data order
  std::vector<std::string> names;
  std::map<std::string, size_t, std::less<>> by_name;
  std::map<std::string, std::string> metadata;

  ~Impl() {
    if (map != nullptr) ::munmap(const_cast<std::byte*>(map), map_size);
  }
  const TensorInfo& find(std::string_view name) const {
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      throw file_error(TESSERA_ERR_INVALID_ARGUMENT, path, name, "no such tensor in the file");
    }
    return tensors[it->second];
  }
  void map_file();
  void parse_header();
};

void SafetensorsReader::Impl::map_file() {
  uint64_t size = 0;
  std::string problem;
  const int fd = open_regular_file(path, size, problem);
  if (fd < 0) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("safetensors file '", path.string(), "' ", problem));
  }
  map_size = static_cast<size_t>(size);
  if (map_size < 8) {
    ::close(fd);
    throw file_error(TESSERA_ERR_INVALID_ARGUMENT, path, "", "file has ", map_size,
                     " bytes, fewer than the 8-byte header length");
  }
  void* mapped = ::mmap(nullptr, map_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (mapped == MAP_FAILED) {
    throw file_error(TESSERA_ERR_INVALID_ARGUMENT, path, "", "cannot map: ", std::strerror(err));
  }
  map = static_cast<const std::byte*>(mapped);
}

void SafetensorsReader::Impl::parse_header() {
  constexpr auto kInvalid = TESSERA_ERR_INVALID_ARGUMENT;
  uint64_t header_size = 0;
  std::memcpy(&header_size, map, 8);  // little-endian host (static_assert)
  if (header_size > map_size - 8) {
    throw file_error(kInvalid, path, "", "header length ", header_size,
                     " exceeds the file size of ", map_size, " bytes");
  }
  if (header_size > kMaxHeaderBytes) {
    throw file_error(kInvalid, path, "", "header length ", header_size, " exceeds the limit of ",
                     kMaxHeaderBytes, " bytes");
  }
  const auto* text = reinterpret_cast<const char*>(map + 8);
  data = map + 8 + header_size;
  const uint64_t data_size = map_size - 8 - header_size;

  // Duplicate keys would silently overwrite each other in the parsed object,
  // so top-level keys are checked while parsing.
  std::set<std::string> seen;
  std::string duplicate;
  const Json::parser_callback_t on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second) duplicate = key;
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, text + header_size, on_event);
  } catch (const nlohmann::json::exception& e) {
    throw file_error(kInvalid, path, "", "header is not valid JSON: ", e.what());
  }
  if (!duplicate.empty()) throw file_error(kInvalid, path, duplicate, "appears twice in header");
  if (!header.is_object()) throw file_error(kInvalid, path, "", "header is not a JSON object");

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        throw file_error(kInvalid, path, "", "\"__metadata__\" is not a JSON object");
      }
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          throw file_error(kInvalid, path, "", "\"__metadata__\" entry '", key,
                           "' is not a string");
        }
        metadata[key] = value.get<std::string>();
      }
      continue;
    }
    tensors.push_back(parse_entry(name, entry, path, data_size));
  }

  // Tensors must tile the data section: sorted by offset, each starts where
  // the previous one ended and the last ends at the end of the file.
  std::stable_sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t position = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& info : tensors) {
    if (info.begin < position) {
      throw file_error(kInvalid, path, info.name, "data_offsets [", info.begin, ", ", info.end,
                       "] overlap tensor '", previous->name, "' ending at ", position);
    }
    if (info.begin > position) {
      throw file_error(kInvalid, path, info.name, "data_offsets start at ", info.begin,
                       " leaving a gap after byte ", position, " of the data section");
    }
    position = info.end;
    previous = &info;
  }
  if (position != data_size) {
    throw file_error(kInvalid, path, "", "data section has ", data_size,
                     " bytes but its tensors cover only ", position);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    names.push_back(tensors[i].name);
    by_name.emplace(tensors[i].name, i);
  }
}

SafetensorsReader SafetensorsReader::open(const std::filesystem::path& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->map_file();
  impl->parse_header();
  return SafetensorsReader(std::move(impl));
}

SafetensorsReader::SafetensorsReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsReader::SafetensorsReader(SafetensorsReader&&) noexcept = default;
SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&&) noexcept = default;
SafetensorsReader::~SafetensorsReader() = default;

const std::filesystem::path& SafetensorsReader::path() const noexcept { return impl_->path; }

const std::vector<std::string>& SafetensorsReader::names() const noexcept { return impl_->names; }

bool SafetensorsReader::contains(std::string_view name) const noexcept {
  return impl_->by_name.find(name) != impl_->by_name.end();
}

const TensorInfo& SafetensorsReader::info(std::string_view name) const { return impl_->find(name); }

std::span<const std::byte> SafetensorsReader::data(std::string_view name) const {
  const TensorInfo& info = impl_->find(name);
  return {impl_->data + info.begin, static_cast<size_t>(info.nbytes())};
}

const std::map<std::string, std::string>& SafetensorsReader::metadata() const noexcept {
  return impl_->metadata;
}

void SafetensorsReader::read_into(std::string_view name, tessera_dtype dtype, void* out,
                                  size_t count) const {
  const TensorInfo& info = impl_->find(name);
  if (info.dtype != dtype) {
    throw file_error(TESSERA_ERR_MISMATCH, impl_->path, name, "is ",
                     safetensors_dtype_name(info.dtype), ", not the requested ",
                     safetensors_dtype_name(dtype));
  }
  if (info.numel() != count) {
    throw file_error(TESSERA_ERR_MISMATCH, impl_->path, name, "has ", info.numel(),
                     " elements but the destination holds ", count);
  }
  if (count != 0) std::memcpy(out, impl_->data + info.begin, static_cast<size_t>(info.nbytes()));
}

}  // namespace tessera

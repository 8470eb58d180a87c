// SafetensorsWriter: collects tensor descriptions, then streams the header
// and the data into an atomically written file.
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "tessera/core/atomic_file.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

// Byte size of numel(shape) elements of `dtype`, with overflow checked.
uint64_t tensor_bytes(const std::string& name, tessera_dtype dtype,
                      const std::vector<uint64_t>& shape) {
  const uint64_t numel = shape_numel(shape);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(numel, tessera_dtype_size(dtype), &bytes)) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("safetensors writer: tensor '", name, "' is too large"));
  }
  return bytes;
}

}  // namespace

SafetensorsWriter::Entry& SafetensorsWriter::push(std::string name, tessera_dtype dtype,
                                                  std::vector<uint64_t> shape) {
  if (name.empty()) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, "safetensors writer: tensor name is empty");
  }
  if (name == "__metadata__") {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                "safetensors writer: '__metadata__' is reserved and cannot name a tensor");
  }
  if (by_name_.count(name) != 0) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("safetensors writer: tensor '", name, "' added twice"));
  }
  if (dtype < 0 || dtype >= TESSERA_DTYPE_COUNT) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, detail::concat("safetensors writer: tensor '", name,
                                                             "' has unknown dtype value ", dtype));
  }
  const uint64_t bytes = tensor_bytes(name, dtype, shape);
  Entry entry;
  entry.info.name = name;
  entry.info.dtype = dtype;
  entry.info.shape = std::move(shape);
  entry.info.begin = data_size_;
  entry.info.end = data_size_ + bytes;
  by_name_.emplace(std::move(name), entries_.size());
  entries_.push_back(std::move(entry));
  data_size_ += bytes;
  return entries_.back();
}

void SafetensorsWriter::add(std::string name, tessera_dtype dtype, std::vector<uint64_t> shape,
                            const void* data) {
  if (data == nullptr && shape_numel(shape) != 0) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("safetensors writer: tensor '", name,
                               "' has elements but a null data pointer"));
  }
  push(std::move(name), dtype, std::move(shape)).data = data;
}

void SafetensorsWriter::add_owned(std::string name, tessera_dtype dtype,
                                  std::vector<uint64_t> shape, std::vector<std::byte> bytes) {
  if (dtype >= 0 && dtype < TESSERA_DTYPE_COUNT) {
    const uint64_t expected = tensor_bytes(name, dtype, shape);
    if (expected != bytes.size()) {
      throw Error(TESSERA_ERR_MISMATCH,
                  detail::concat("safetensors writer: tensor '", name, "' of ",
                                 safetensors_dtype_name(dtype), " needs ", expected,
                                 " bytes for its shape but ", bytes.size(), " were given"));
    }
  }
  Entry& entry = push(std::move(name), dtype, std::move(shape));
  entry.owned = std::move(bytes);  // save() reads owned bytes, never a stale pointer
}

void SafetensorsWriter::check_count(const std::string& name, const std::vector<uint64_t>& shape,
                                    size_t count) const {
  const uint64_t numel = shape_numel(shape);
  if (numel != count) {
    throw Error(TESSERA_ERR_MISMATCH,
                detail::concat("safetensors writer: tensor '", name, "' has ", numel,
                               " elements by its shape but ", count, " values were given"));
  }
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

std::vector<std::byte> SafetensorsWriter::header_bytes() const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata_) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  for (const Entry& entry : entries_) {
    const TensorInfo& info = entry.info;
    header[info.name] = {{"dtype", safetensors_dtype_name(info.dtype)},
                         {"shape", info.shape},
                         {"data_offsets", {info.begin, info.end}}};
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("safetensors writer: a tensor name or metadata entry is not valid "
                               "UTF-8: ",
                               e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const auto length = static_cast<uint64_t>(text.size());
  std::vector<std::byte> bytes(8 + text.size());
  std::memcpy(bytes.data(), &length, 8);  // little-endian host (static_assert)
  std::memcpy(bytes.data() + 8, text.data(), text.size());
  return bytes;
}

uint64_t SafetensorsWriter::file_size() const { return header_bytes().size() + data_size_; }

void SafetensorsWriter::save(const std::filesystem::path& path) const {
  const std::vector<std::byte> header = header_bytes();
  write_file_atomically(path, [&](AtomicFileSink& sink) {
    sink.write(header);
    for (const Entry& entry : entries_) {
      const void* data = entry.owned.empty() ? entry.data : entry.owned.data();
      sink.write(data, entry.info.nbytes());
    }
  });
}

}  // namespace tessera

// Writing a sharded training checkpoint: the step directory, each rank's
// file, the slice records sent to rank 0, the index and `latest`.
#include "tessera/core/train/sharded_checkpoint.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <set>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "tessera/core/atomic_file.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/train/checkpointing.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace {

using Json = nlohmann::json;

constexpr int kSliceTag = 7302;  // p2p tag of the slice-record gather

// Whether `name` is a file an attempt at a step may have left: the index,
// the full model file, a rank file, or a temporary file of any of them.
bool is_checkpoint_file(const std::string& name) {
  const auto stem_of = [](std::string_view n) {
    const auto tmp = n.find(".tmp.");
    return tmp == std::string_view::npos ? n : n.substr(0, tmp);
  };
  const std::string_view stem = stem_of(name);
  if (stem == kIndexFile || stem == kModelFile) return true;
  constexpr std::string_view prefix = "rank";
  constexpr std::string_view suffix = ".safetensors";
  if (stem.size() <= prefix.size() + suffix.size() || !stem.starts_with(prefix) ||
      !stem.ends_with(suffix)) {
    return false;
  }
  const std::string_view digits =
      stem.substr(prefix.size(), stem.size() - prefix.size() - suffix.size());
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

void remove_file(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (ec) {
    throw Error(TESSERA_ERR_INTERNAL, "checkpoint: cannot remove '" + path.string() +
                                          "' left by an earlier attempt: " + ec.message());
  }
}

}  // namespace

std::filesystem::path prepare_sharded_step_dir(const std::filesystem::path& dir, int64_t step) {
  std::filesystem::path step_dir = dir / checkpoint_dir_name(step);
  std::error_code ec;
  std::filesystem::create_directories(step_dir, ec);
  if (ec || !std::filesystem::is_directory(step_dir)) {
    throw Error(TESSERA_ERR_INTERNAL,
                "checkpoint: cannot create directory '" + step_dir.string() + "'" +
                    (ec ? ": " + ec.message() : std::string(": a file of that name exists")));
  }
  // The index goes first: once it is gone, no reader takes the files below
  // as a checkpoint.
  if (std::filesystem::exists(step_dir / kIndexFile, ec)) remove_file(step_dir / kIndexFile);
  std::vector<std::filesystem::path> stale;
  for (std::filesystem::directory_iterator it(step_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (is_checkpoint_file(it->path().filename().string())) stale.push_back(it->path());
  }
  if (ec) {
    throw Error(TESSERA_ERR_INTERNAL,
                "checkpoint: cannot list '" + step_dir.string() + "': " + ec.message());
  }
  for (const std::filesystem::path& path : stale) remove_file(path);
  return step_dir;
}

std::vector<SliceRecord> write_rank_shard(const std::filesystem::path& step_dir, int rank,
                                          const CollectedState& state,
                                          std::map<std::string, std::string> metadata) {
  const std::string file_name = shard_file_name(rank);
  SafetensorsWriter writer;
  std::vector<SliceRecord> records;
  for (const auto& [name, tensor] : state.tensors) {
    const auto pieces = std::count_if(tensor.pieces.begin(), tensor.pieces.end(),
                                      [](const auto& p) { return !p.values.empty(); });
    const std::vector<uint64_t> dims(tensor.shape.begin(), tensor.shape.end());
    for (const CollectedState::Piece& piece : tensor.pieces) {
      if (piece.values.empty()) continue;
      SliceRecord record;
      record.tensor = name;
      record.shape = tensor.shape;
      record.slice.file = file_name;
      record.slice.count = piece.values.size();
      // A flat piece that is a box (whole rows, a whole tensor, any range
      // of a 1-d tensor) is stored as that box.
      record.slice.box =
          piece.box ? piece.box : flat_range_as_box(dims, piece.offset, record.slice.count);
      record.slice.offset = record.slice.box ? 0 : piece.offset;
      const uint64_t first = record.slice.box
                                 ? SliceLayout::of_box(dims, *record.slice.box).flat_begin()
                                 : piece.offset;
      record.slice.key = pieces == 1 ? name : name + "@" + std::to_string(first);
      std::vector<uint64_t> stored_shape =
          record.slice.box ? record.slice.box->extent : std::vector<uint64_t>{record.slice.count};
      writer.add<float>(record.slice.key, std::move(stored_shape),
                        std::span<const float>(piece.values));
      records.push_back(std::move(record));
    }
  }
  metadata["rank"] = std::to_string(rank);
  for (auto& [key, value] : metadata) writer.set_metadata(key, value);
  const std::filesystem::path file = step_dir / file_name;
  remove_stale_temp_files(file);
  writer.save(file);
  return records;
}

std::string format_slice_records(const std::vector<SliceRecord>& records) {
  Json all = Json::array();
  for (const SliceRecord& r : records) {
    Json record = {{"tensor", r.tensor}, {"shape", r.shape},         {"file", r.slice.file},
                   {"key", r.slice.key}, {"offset", r.slice.offset}, {"count", r.slice.count}};
    if (r.slice.box) {
      record["box_offset"] = r.slice.box->offset;
      record["box_extent"] = r.slice.box->extent;
    }
    all.push_back(std::move(record));
  }
  return all.dump();
}

std::vector<SliceRecord> parse_slice_records(const std::string& text, const std::string& from) {
  std::vector<SliceRecord> records;
  try {
    const Json all = Json::parse(text);
    if (!all.is_array()) throw Error(TESSERA_ERR_INVALID_ARGUMENT, "not a JSON array");
    for (const Json& j : all) {
      SliceRecord r;
      r.tensor = j.at("tensor").get<std::string>();
      r.shape = j.at("shape").get<std::vector<int64_t>>();
      r.slice.file = j.at("file").get<std::string>();
      r.slice.key = j.at("key").get<std::string>();
      r.slice.offset = j.at("offset").get<uint64_t>();
      r.slice.count = j.at("count").get<uint64_t>();
      if (j.contains("box_offset")) {
        r.slice.box = TensorBox{j.at("box_offset").get<std::vector<uint64_t>>(),
                                j.at("box_extent").get<std::vector<uint64_t>>()};
      }
      records.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                "checkpoint: malformed slice records from " + from + ": " + e.what());
  } catch (const Error& e) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                "checkpoint: malformed slice records from " + from + ": " + e.what());
  }
  return records;
}

std::vector<SliceRecord> gather_slice_records(Communicator& comm, std::vector<SliceRecord> mine) {
  if (comm.rank() != 0) {
    std::string text = format_slice_records(mine);
    int64_t size = static_cast<int64_t>(text.size());
    comm.send(cpu_buffer(std::span<int64_t>(&size, 1)), 0, kSliceTag);
    comm.send(cpu_buffer(text.data(), text.size(), TESSERA_U8), 0, kSliceTag);
    return {};
  }
  std::vector<SliceRecord> all = std::move(mine);
  for (int peer = 1; peer < comm.size(); ++peer) {
    int64_t size = 0;
    comm.recv(cpu_buffer(std::span<int64_t>(&size, 1)), peer, kSliceTag);
    TESSERA_CHECK(size >= 0, TESSERA_ERR_INVALID_ARGUMENT, "checkpoint: rank ", peer, " announced ",
                  size, " bytes of slice records");
    std::string text(static_cast<size_t>(size), '\0');
    comm.recv(cpu_buffer(text.data(), text.size(), TESSERA_U8), peer, kSliceTag);
    std::vector<SliceRecord> theirs = parse_slice_records(text, "rank " + std::to_string(peer));
    all.insert(all.end(), std::make_move_iterator(theirs.begin()),
               std::make_move_iterator(theirs.end()));
  }
  return all;
}

std::filesystem::path write_sharded_index(const std::filesystem::path& dir, int64_t step,
                                          int world_size, const std::vector<SliceRecord>& records,
                                          const std::vector<std::string>& order,
                                          std::map<std::string, std::string> metadata) {
  ShardedIndex index;
  index.world_size = world_size;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const SliceRecord& r : records) {
    const auto [it, added] = shapes.emplace(r.tensor, r.shape);
    if (!added && it->second != r.shape) {
      throw Error(TESSERA_ERR_MISMATCH,
                  fmt::format("checkpoint: ranks disagree on the shape of tensor '{}': [{}] and "
                              "[{}] (slice '{}' of '{}')",
                              r.tensor, fmt::join(it->second, ", "), fmt::join(r.shape, ", "),
                              r.slice.key, r.slice.file));
    }
    ShardedTensor& tensor = index.tensors[r.tensor];
    if (added) {
      tensor.dtype = TESSERA_F32;
      for (const int64_t d : r.shape) {
        TESSERA_CHECK(d >= 0, TESSERA_ERR_INVALID_ARGUMENT, "checkpoint: tensor '", r.tensor,
                      "' has a negative dimension");
        tensor.shape.push_back(static_cast<uint64_t>(d));
      }
    }
    tensor.slices.push_back(r.slice);
  }
  Json names = Json::array();
  std::set<std::string> listed;
  for (const std::string& name : order) {
    if (index.tensors.count(name) != 0 && listed.insert(name).second) names.push_back(name);
  }
  for (const auto& [name, tensor] : index.tensors) {
    if (listed.insert(name).second) names.push_back(name);
  }
  metadata["step"] = std::to_string(step);
  metadata["format"] = "sharded";
  metadata["tensor_order"] = names.dump();
  index.metadata = std::move(metadata);

  std::filesystem::path index_path = dir / checkpoint_dir_name(step) / kIndexFile;
  remove_stale_temp_files(index_path);
  write_index(index_path, index);
  write_latest(dir, step);
  return index_path;
}

}  // namespace tessera::train

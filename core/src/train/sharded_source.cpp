// Reading a sharded training checkpoint: the state source a strategy's
// load() reads slices (flat ranges or boxes) from, the check of the rank files, and the tensor
// order of a full checkpoint.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "../whole_number.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/train/checkpointing.hpp"
#include "tessera/core/train/sharded_checkpoint.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace {

class ShardedSource final : public StateSource {
 public:
  explicit ShardedSource(const std::filesystem::path& index_path)
      : checkpoint_(ShardedCheckpoint::open(index_path)), describe_(index_path.string()) {}

  [[nodiscard]] bool has(const std::string& name) const override {
    return checkpoint_.index().tensors.count(name) != 0;
  }

  void read(const SliceRef& slice, std::span<float> out) const override {
    const auto it = checkpoint_.index().tensors.find(slice.name);
    TESSERA_CHECK(it != checkpoint_.index().tensors.end(), TESSERA_ERR_INVALID_ARGUMENT, describe_,
                  ": no tensor '", slice.name, "'");
    const ShardedTensor& tensor = it->second;
    TESSERA_CHECK(tensor.dtype == TESSERA_F32, TESSERA_ERR_INVALID_ARGUMENT, describe_,
                  ": tensor '", slice.name, "' is ", safetensors_dtype_name(tensor.dtype),
                  ", training state must be F32");
    std::vector<int64_t> shape;
    for (const uint64_t d : tensor.shape) {
      TESSERA_CHECK(d <= static_cast<uint64_t>(INT64_MAX), TESSERA_ERR_INVALID_ARGUMENT, describe_,
                    ": tensor '", slice.name, "' has a dimension too large");
      shape.push_back(static_cast<int64_t>(d));
    }
    check_slice_request(describe_, slice, shape, out.size());
    if (slice.box) {
      checkpoint_.read_box<float>(slice.name, *slice.box, out);
    } else {
      checkpoint_.read<float>(slice.name, slice.offset, out);
    }
  }

  [[nodiscard]] std::string describe() const override { return describe_; }

 private:
  // Opens rank files lazily, hence mutable; the source is used by one rank.
  mutable ShardedCheckpoint checkpoint_;
  std::string describe_;
};

}  // namespace

bool is_sharded_index(const std::filesystem::path& file) { return file.extension() == ".json"; }

std::unique_ptr<StateSource> sharded_source(const std::filesystem::path& index_path) {
  return std::make_unique<ShardedSource>(index_path);
}

std::unique_ptr<StateSource> checkpoint_source(const std::filesystem::path& file) {
  if (is_sharded_index(file)) return sharded_source(file);
  return safetensors_source(file);
}

namespace {

// A rank file must have been written with its index: what both record
// agrees, and the rank it records is the one its name gives.
void check_rank_file_record(const std::filesystem::path& index_path, const ShardedIndex& index,
                            const std::string& file, const SafetensorsReader& reader) {
  const std::map<std::string, std::string>& mine = reader.metadata();
  for (const char* key : {"step", "seed", "world_size", "model"}) {
    const auto theirs = index.metadata.find(key);
    const auto own = mine.find(key);
    if (theirs == index.metadata.end() || own == mine.end() || own->second == theirs->second) {
      continue;
    }
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                fmt::format("sharded checkpoint: rank file '{}' records {} {}, but index '{}' "
                            "records {} {}: the file belongs to another checkpoint (copied from "
                            "another step or run?)",
                            reader.path().string(), key, own->second, index_path.string(), key,
                            theirs->second));
  }
  const auto rank = mine.find("rank");
  if (rank == mine.end()) return;
  const std::optional<int64_t> recorded = whole_number(rank->second);
  // "rank00003.safetensors" names rank 3.
  constexpr std::string_view kRankPrefix = "rank";
  const std::string_view stem = std::string_view(file).substr(0, file.find('.'));
  const std::optional<int64_t> named =
      stem.starts_with(kRankPrefix) ? whole_number(stem.substr(kRankPrefix.size())) : std::nullopt;
  const auto refuse = [&](const std::string& why) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                fmt::format("sharded checkpoint: rank file '{}' records rank '{}', but {}",
                            reader.path().string(), rank->second, why));
  };
  if (!recorded) refuse("that is not a rank number");
  if (named && *named != *recorded) refuse(fmt::format("its name says rank {}", *named));
  if (*recorded >= index.world_size) {
    refuse(
        fmt::format("index '{}' was written by {} ranks", index_path.string(), index.world_size));
  }
}

}  // namespace

void verify_sharded_files(const std::filesystem::path& index_path, const ShardedIndex& index) {
  std::map<std::string, SafetensorsReader> files;
  for (const auto& [name, tensor] : index.tensors) {
    for (const ShardSlice& slice : tensor.slices) {
      auto it = files.find(slice.file);
      if (it == files.end()) {
        it =
            files
                .emplace(slice.file, SafetensorsReader::open(index_path.parent_path() / slice.file))
                .first;
        check_rank_file_record(index_path, index, slice.file, it->second);
      }
      const SafetensorsReader& reader = it->second;
      TESSERA_CHECK(reader.contains(slice.key), TESSERA_ERR_INVALID_ARGUMENT, "safetensors file '",
                    reader.path().string(), "' has no tensor '", slice.key, "', which index '",
                    index_path.string(), "' lists for tensor '", name, "'");
      const TensorInfo& info = reader.info(slice.key);
      TESSERA_CHECK(info.dtype == tensor.dtype && info.numel() == slice.count,
                    TESSERA_ERR_INVALID_ARGUMENT, "safetensors file '", reader.path().string(),
                    "': tensor '", slice.key, "' is ", safetensors_dtype_name(info.dtype), " with ",
                    info.numel(), " elements but index '", index_path.string(), "' expects ",
                    safetensors_dtype_name(tensor.dtype), " with ", slice.count, " for tensor '",
                    name, "'");
    }
  }
}

std::vector<std::string> sharded_tensor_order(const ShardedIndex& index) {
  std::vector<std::string> order;
  std::set<std::string> listed;
  if (const auto it = index.metadata.find("tensor_order"); it != index.metadata.end()) {
    const nlohmann::json names = nlohmann::json::parse(it->second, nullptr, false);
    if (names.is_array()) {
      for (const auto& name : names) {
        if (!name.is_string()) continue;
        const auto text = name.get<std::string>();
        if (index.tensors.count(text) != 0 && listed.insert(text).second) order.push_back(text);
      }
    }
  }
  for (const bool optim : {false, true}) {
    for (const auto& [name, tensor] : index.tensors) {
      if (name.starts_with(kOptimPrefix) == optim && listed.insert(name).second) {
        order.push_back(name);
      }
    }
  }
  return order;
}

}  // namespace tessera::train

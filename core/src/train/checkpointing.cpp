#include "tessera/core/train/checkpointing.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "../whole_number.hpp"
#include "invalid_input.hpp"
#include "tessera/core/atomic_file.hpp"
#include "tessera/core/input_file.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/safetensors_index.hpp"
#include "tessera/core/train/sharded_checkpoint.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace {

// `latest` holds one directory name; anything longer is not a `latest`.
constexpr uint64_t kMaxLatestBytes = 4096;

std::string trim(const std::string& text) {
  const auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const auto end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  return "[" + fmt::format("{}", fmt::join(shape, ", ")) + "]";
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) { return fmt::format("step-{:08}", step); }

std::optional<int64_t> parse_checkpoint_dir_name(const std::string& name) {
  constexpr std::string_view prefix = "step-";
  if (!name.starts_with(prefix)) return std::nullopt;
  return whole_number(std::string_view(name).substr(prefix.size()));
}

std::optional<CheckpointInfo> find_latest_checkpoint(const std::filesystem::path& dir) {
  const std::filesystem::path latest = dir / kLatestFile;
  std::error_code ec;
  if (!std::filesystem::exists(latest, ec)) return std::nullopt;
  const std::string name = trim(read_input_file(latest, "checkpoint:", kMaxLatestBytes));
  const auto step = parse_checkpoint_dir_name(name);
  if (!step) {
    fail("checkpoint: '" + latest.string() + "' must hold a directory name like 'step-00000100', " +
         "got '" + name + "'");
  }
  CheckpointInfo info;
  info.step = *step;
  const std::filesystem::path model_file = dir / name / kModelFile;
  const std::filesystem::path index_file = dir / name / kIndexFile;
  for (const auto& file : {model_file, index_file}) {
    const std::string problem = regular_file_problem(file);
    if (!problem.empty() && problem != "does not exist") {
      fail("checkpoint: '" + file.string() + "' " + problem);
    }
  }
  const bool full = std::filesystem::is_regular_file(model_file, ec);
  const bool sharded = std::filesystem::is_regular_file(index_file, ec);
  if (full && sharded) {
    fail("checkpoint: '" + (dir / name).string() + "' holds both " + kModelFile + " and " +
         kIndexFile + "; remove the one that is not the checkpoint of step " +
         std::to_string(*step));
  }
  if (!full && !sharded) {
    fail("checkpoint: '" + latest.string() + "' names '" + name +
         "', but that checkpoint does not exist: '" + (dir / name).string() + "' holds neither " +
         kModelFile + " (format full) nor " + kIndexFile + " (format sharded)");
  }
  if (sharded) {
    info.format = CheckpointFormat::sharded;
    info.file = index_file;
    const ShardedIndex index = read_index(index_file);
    verify_sharded_files(index_file, index);
    info.metadata = index.metadata;
  } else {
    info.file = model_file;
    info.metadata = SafetensorsReader::open(info.file).metadata();
  }
  const auto recorded = info.metadata.find("step");
  if (recorded != info.metadata.end() && recorded->second != std::to_string(*step)) {
    fail("checkpoint: '" + info.file.string() + "' records step " + recorded->second +
         " but its directory says " + std::to_string(*step));
  }
  // The run reshards by it (and says so); a value that is no rank count is
  // a damaged file.
  if (const auto world = info.metadata.find("world_size"); world != info.metadata.end()) {
    const std::optional<int64_t> ranks = whole_number(world->second);
    if (!ranks || *ranks < 1) {
      fail("checkpoint: '" + info.file.string() + "' records world_size '" + world->second +
           "', which is not a number of ranks");
    }
  }
  return info;
}

void write_latest(const std::filesystem::path& dir, int64_t step) {
  remove_stale_temp_files(dir / kLatestFile);
  write_file_atomically(dir / kLatestFile, checkpoint_dir_name(step) + "\n");
}

std::vector<std::string> checkpoint_tensor_order(const model::Model& model,
                                                 const Optimizer& optimizer) {
  std::vector<std::string> params;
  for (size_t u = 0; u < model.size(); ++u) {
    const auto specs = model.params(u);
    for (size_t p = 0; p < specs.size(); ++p) {
      if (model.owner(u, p) == model::ParamRef{u, p}) {
        params.push_back(fmt::format("{}.{}", model.unit_name(u), specs[p].name));
      }
    }
  }
  std::vector<std::string> order = params;
  const std::vector<std::string> slots = optimizer.slot_names();
  for (const auto& param : params) {
    for (const auto& slot : slots)
      order.push_back(fmt::format("{}{}.{}", kOptimPrefix, param, slot));
  }
  return order;
}

std::filesystem::path write_checkpoint(const std::filesystem::path& dir, int64_t step,
                                       const CollectedState& state,
                                       const std::vector<std::string>& order,
                                       std::map<std::string, std::string> metadata) {
  std::vector<std::string> names;
  std::set<std::string> listed;
  for (const auto& name : order) {
    if (state.tensors.count(name) != 0 && listed.insert(name).second) names.push_back(name);
  }
  for (const auto& [name, tensor] : state.tensors) {
    if (listed.insert(name).second) names.push_back(name);
  }

  SafetensorsWriter writer;
  std::deque<std::vector<float>> values;  // stable addresses while the writer borrows them
  for (const auto& name : names) {
    const CollectedState::Tensor& tensor = state.tensors.at(name);
    values.push_back(state.full(name));
    std::vector<uint64_t> shape(tensor.shape.begin(), tensor.shape.end());
    writer.add<float>(name, std::move(shape), std::span<const float>(values.back()));
  }
  metadata["step"] = std::to_string(step);
  for (auto& [key, value] : metadata) writer.set_metadata(key, value);

  const std::string dir_name = checkpoint_dir_name(step);
  const std::filesystem::path step_dir = dir / dir_name;
  std::error_code ec;
  std::filesystem::create_directories(step_dir, ec);
  if (ec) {
    throw Error(TESSERA_ERR_INTERNAL,
                "checkpoint: cannot create '" + step_dir.string() + "': " + ec.message());
  }
  // An index of an earlier sharded attempt at this step would make the
  // directory ambiguous.
  if (std::filesystem::exists(step_dir / kIndexFile, ec)) {
    std::filesystem::remove(step_dir / kIndexFile, ec);
    if (ec) {
      throw Error(
          TESSERA_ERR_INTERNAL,
          "checkpoint: cannot remove '" + (step_dir / kIndexFile).string() + "': " + ec.message());
    }
  }
  std::filesystem::path file = step_dir / kModelFile;
  remove_stale_temp_files(file);
  writer.save(file);
  write_latest(dir, step);
  return file;
}

bool ParametersOnly::has(const std::string& name) const {
  if (name.compare(0, kOptimPrefix.size(), kOptimPrefix) == 0) return false;
  return inner_.has(name);
}

void ParametersOnly::read(const SliceRef& slice, std::span<float> out) const {
  if (slice.name.compare(0, kOptimPrefix.size(), kOptimPrefix) == 0) {
    fail(inner_.describe() + ": optimizer state '" + slice.name +
         "' is not taken from an initial-weights file");
  }
  inner_.read(slice, out);
}

std::string ParametersOnly::describe() const { return inner_.describe() + " (parameters)"; }

void check_parameters_file(const std::filesystem::path& file, const model::Model& model,
                           const std::string& what) {
  if (const std::string problem = regular_file_problem(file); !problem.empty()) {
    fail(what + ": file '" + file.string() + "' " + problem);
  }
  // What the file says about one tensor: absent, or dtype and shape.
  struct Found {
    tessera_dtype dtype = TESSERA_F32;
    std::vector<uint64_t> shape;
  };
  std::function<std::optional<Found>(const std::string&)> lookup;
  std::optional<SafetensorsReader> reader;
  std::optional<ShardedIndex> index;
  if (is_sharded_index(file)) {
    index = read_index(file);
    lookup = [&](const std::string& name) -> std::optional<Found> {
      const auto it = index->tensors.find(name);
      if (it == index->tensors.end()) return std::nullopt;
      return Found{it->second.dtype, it->second.shape};
    };
  } else {
    reader = SafetensorsReader::open(file);
    lookup = [&](const std::string& name) -> std::optional<Found> {
      if (!reader->contains(name)) return std::nullopt;
      const TensorInfo& info = reader->info(name);
      return Found{info.dtype, info.shape};
    };
  }
  for (size_t u = 0; u < model.size(); ++u) {
    const auto specs = model.params(u);
    for (size_t p = 0; p < specs.size(); ++p) {
      if (model.owner(u, p) != model::ParamRef{u, p}) continue;
      const std::string name = fmt::format("{}.{}", model.unit_name(u), specs[p].name);
      const std::vector<uint64_t> shape(specs[p].shape.begin(), specs[p].shape.end());
      const std::optional<Found> found = lookup(name);
      if (!found) {
        fail(fmt::format("{}: '{}' has no tensor '{}' (model '{}' needs it with shape {})", what,
                         file.string(), name, model.name(), shape_text(shape)));
      }
      if (found->dtype != TESSERA_F32) {
        fail(fmt::format("{}: '{}' tensor '{}' is {}, but parameters are F32", what, file.string(),
                         name, safetensors_dtype_name(found->dtype)));
      }
      if (found->shape != shape) {
        fail(fmt::format("{}: '{}' tensor '{}' has shape {}, but model '{}' needs {}", what,
                         file.string(), name, shape_text(found->shape), model.name(),
                         shape_text(shape)));
      }
    }
  }
}

}  // namespace tessera::train

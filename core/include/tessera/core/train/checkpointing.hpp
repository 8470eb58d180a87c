// Training checkpoints on disk: one directory per step,
//
//   <dir>/step-00000200/model.safetensors   format "full": every tensor,
//                                           merged from all ranks on rank 0
//   <dir>/step-00000200/index.json          format "sharded": one file per
//   <dir>/step-00000200/rank00000.safetensors ... rank plus the index
//                                           (sharded_checkpoint.hpp)
//   <dir>/latest                            "step-00000200", written last
//
// with parameters named "<unit>.<param>" and optimizer state
// "optim.<unit>.<param>.<slot>". Every file is replaced atomically and
// `latest` is written after the checkpoint is complete, so it only ever
// names a complete checkpoint. The data position and the random state are
// pure functions of (run.seed, step) and need no tensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/model/model.hpp"
#include "tessera/core/optim/optimizer.hpp"
#include "tessera/core/train/strategy_host.hpp"

namespace tessera::train {

// The files of a step directory, and the name prefix of optimizer state.
inline constexpr const char* kModelFile = "model.safetensors";  // format full
inline constexpr const char* kIndexFile = "index.json";         // format sharded
inline constexpr std::string_view kOptimPrefix = "optim.";

// The file of a checkpoint directory that names its newest step directory.
inline constexpr const char* kLatestFile = "latest";

// "step-00000042": the directory name of step `step` (8 digits, more when
// the step needs them).
std::string checkpoint_dir_name(int64_t step);

// The step a directory name encodes; nullopt unless it is "step-" followed
// by digits only.
std::optional<int64_t> parse_checkpoint_dir_name(const std::string& name);

// How a checkpoint is stored.
enum class CheckpointFormat {
  full,     // one model.safetensors
  sharded,  // index.json plus one rank file per rank that wrote it
};

// One checkpoint found on disk.
struct CheckpointInfo {
  // full: <dir>/step-XXXXXXXX/model.safetensors; sharded: .../index.json
  std::filesystem::path file;
  CheckpointFormat format = CheckpointFormat::full;
  int64_t step = 0;
  std::map<std::string, std::string> metadata;  // __metadata__ or the index's metadata
};

// The checkpoint `<dir>/latest` names, opened and validated; nullopt when
// `dir` or `latest` does not exist (nothing to resume). The step directory
// holds either index.json (sharded; the index, every rank file and every
// slice key are checked) or model.safetensors (full). Throws tessera::Error
// (invalid argument) naming the path when `latest` is not a regular file,
// is larger than 4 KiB or does not hold one step directory name, the
// directory holds neither file or both, a file is missing, not a regular
// file or invalid, or the "step" metadata disagrees with the name.
std::optional<CheckpointInfo> find_latest_checkpoint(const std::filesystem::path& dir);

// Replaces `<dir>/latest` atomically with the name of step `step`'s
// directory (removing stale temporary files of an interrupted write first).
// Throws tessera::Error naming the path on failure; the previous `latest`
// is untouched then.
void write_latest(const std::filesystem::path& dir, int64_t step);

// Tensor names in the order a checkpoint stores them: every owned parameter
// in model order, then each parameter's optimizer slots
// ("optim.<unit>.<param>.<slot>") in the same order.
std::vector<std::string> checkpoint_tensor_order(const model::Model& model,
                                                 const Optimizer& optimizer);

// Writes the full checkpoint of `step` into `dir` (created if needed): the
// full value of every tensor of `state` (CollectedState::full; tensors named
// in `order` first, in that order, the rest by name), `metadata` plus
// "step", then `latest`. A sharded index of an earlier attempt at the same
// step is removed first. Returns the model file's path. Throws tessera::Error naming
// the tensor when the pieces do not cover it, or naming the path on an I/O
// failure; the previous checkpoint and `latest` are untouched then.
std::filesystem::path write_checkpoint(const std::filesystem::path& dir, int64_t step,
                                       const CollectedState& state,
                                       const std::vector<std::string>& order,
                                       std::map<std::string, std::string> metadata);

// A state source that hides optimizer state ("optim.*"), so weights taken
// from a file (model.init, possibly a checkpoint) start with fresh optimizer
// state. `inner` must outlive it.
class ParametersOnly final : public StateSource {
 public:
  explicit ParametersOnly(const StateSource& inner) : inner_(inner) {}
  [[nodiscard]] bool has(const std::string& name) const override;
  void read(const SliceRef& slice, std::span<float> out) const override;
  [[nodiscard]] std::string describe() const override;

 private:
  const StateSource& inner_;
};

// Checks that `file` — a safetensors file, or a sharded index (a name
// ending in ".json") — holds every owned parameter of `model` as F32 of the
// parameter's shape. Throws tessera::Error (invalid argument) naming `what`
// ("model.init"), the file and the first tensor that is missing or differs,
// or the file if it is missing, not a regular file (a FIFO, a device, a
// directory) or cannot be read.
void check_parameters_file(const std::filesystem::path& file, const model::Model& model,
                           const std::string& what);

}  // namespace tessera::train

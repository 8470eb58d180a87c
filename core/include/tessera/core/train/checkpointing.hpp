// Training checkpoints on disk (format "full"): one directory per step,
//
//   <dir>/step-00000200/model.safetensors   every tensor, merged from all ranks
//   <dir>/latest                            "step-00000200", written last
//
// with parameters named "<unit>.<param>" and optimizer state
// "optim.<unit>.<param>.<slot>". Both files are replaced atomically, so
// `latest` only ever names a complete checkpoint. The data position and the
// random state are pure functions of (run.seed, step) and need no tensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/model/model.hpp"
#include "tessera/core/optim/optimizer.hpp"
#include "tessera/core/train/strategy_host.hpp"

namespace tessera::train {

// "step-00000042": the directory name of step `step` (8 digits, more when
// the step needs them).
std::string checkpoint_dir_name(int64_t step);

// The step a directory name encodes; nullopt unless it is "step-" followed
// by digits only.
std::optional<int64_t> parse_checkpoint_dir_name(const std::string& name);

// One checkpoint found on disk.
struct CheckpointInfo {
  std::filesystem::path file;  // <dir>/step-XXXXXXXX/model.safetensors
  int64_t step = 0;
  std::map<std::string, std::string> metadata;  // the file's __metadata__
};

// The checkpoint `<dir>/latest` names, opened and validated; nullopt when
// `dir` or `latest` does not exist (nothing to resume). Throws
// tessera::Error (invalid argument) naming the path when `latest` does not
// hold one step directory name, the file it names is missing or not a valid
// safetensors file, or its "step" metadata disagrees with the name.
std::optional<CheckpointInfo> find_latest_checkpoint(const std::filesystem::path& dir);

// Tensor names in the order a checkpoint stores them: every owned parameter
// in model order, then each parameter's optimizer slots
// ("optim.<unit>.<param>.<slot>") in the same order.
std::vector<std::string> checkpoint_tensor_order(const model::Model& model,
                                                 const Optimizer& optimizer);

// Writes the checkpoint of `step` into `dir` (created if needed): the full
// value of every tensor of `state` (CollectedState::full; tensors named in
// `order` first, in that order, the rest by name), `metadata` plus "step",
// then `latest`. Returns the model file's path. Throws tessera::Error naming
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

// Checks that safetensors file `file` holds every owned parameter of
// `model` as F32 of the parameter's shape. Throws tessera::Error (invalid
// argument) naming `what` ("model.init"), the file and the first tensor
// that is missing or differs, or the file if it cannot be read.
void check_parameters_file(const std::filesystem::path& file, const model::Model& model,
                           const std::string& what);

}  // namespace tessera::train

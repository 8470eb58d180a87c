// The model as strategy selection sees it (tessera_model_desc, strategy.h):
// per-unit parameters, FLOPs and activation bytes with the batch, built from
// a model plugin or written by hand (tests, `tessera select` on sizes no
// machine here could build), and the host's call of a strategy's estimate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/c/strategy.h"
#include "tessera/core/model/model.hpp"

namespace tessera::train {

// One unit of a description, owning its name.
struct UnitSpec {
  std::string name;
  uint32_t flags = 0;  // TESSERA_UNIT_*
  int64_t params = 0;
  int64_t split_params = 0;
  int64_t tied_params = 0;
  int32_t tied_unit = -1;  // the unit owning the tied slots' storage
  int32_t num_tensors = 1;
  double forward_flops = 0;
  double backward_flops = 0;
  double activation_bytes = 0;
  double output_bytes = 0;
  double split_activation_bytes = 0;
  double sequence_activation_bytes = 0;
};

// The batch a description trains on.
struct BatchSpec {
  int64_t global_batch = 1;
  int64_t micro_batches = 1;
  int32_t optimizer_slots = 2;  // adam / adamw
};

class ModelDescription {
 public:
  // From a built model: its units' costs (model 2.2 fields when the model
  // has them), parameter splits and tied slots; the model stays reachable
  // through the description (check_tensor_parallel) and must outlive it.
  ModelDescription(const model::Model& model, const BatchSpec& batch);
  // By hand: `units` in order; seq_len 0 for a feature model.
  ModelDescription(std::string name, std::vector<UnitSpec> units, int64_t seq_len,
                   const BatchSpec& batch);
  ModelDescription(const ModelDescription& other);
  ModelDescription& operator=(const ModelDescription&) = delete;
  ~ModelDescription() = default;

  [[nodiscard]] const tessera_model_desc& c() const noexcept { return desc_; }
  [[nodiscard]] const std::vector<UnitSpec>& units() const noexcept { return units_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  // Σ of the units' own parameters.
  [[nodiscard]] int64_t params() const noexcept;

 private:
  void link();

  std::string name_;
  std::vector<UnitSpec> units_;
  std::vector<tessera_unit_desc> c_units_;
  tessera_model_desc desc_{};
};

}  // namespace tessera::train

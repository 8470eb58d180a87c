// A model: an ordered sequence of units built from the [model] section, with
// tied parameters resolved, plus the single-process reference trainer that
// every strategy is compared against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/config.hpp"
#include "tessera/core/data/batch.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/model/unit.hpp"

namespace tessera::model {

// Where a parameter's storage lives: (unit index, parameter index). For a
// tied slot this is the parameter it is tied to.
struct ParamRef {
  std::size_t unit = 0;
  std::size_t param = 0;
  friend bool operator==(const ParamRef&, const ParamRef&) = default;
};

// Ordered units. The first unit consumes the batch, the last returns the loss.
class Model {
 public:
  // Takes the units and resolves every tied slot. Throws tessera::Error
  // (invalid argument) naming the unit and parameter when there are no
  // units, the first/last flags are wrong, unit names repeat, or a tie names
  // a missing parameter, a tied one, or one of another shape.
  Model(std::string name, std::vector<std::unique_ptr<Unit>> units, DataShape shape);

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::size_t size() const noexcept { return units_.size(); }
  [[nodiscard]] const Unit& unit(std::size_t i) const { return *units_.at(i); }
  // The data layout this model consumes (for make_dataset and Batch::make).
  [[nodiscard]] const DataShape& data_shape() const noexcept { return shape_; }
  // Storage of parameter `param` of unit `unit` (itself unless tied).
  [[nodiscard]] ParamRef owner(std::size_t unit, std::size_t param) const;
  // Number of distinct (non-tied) parameter elements.
  [[nodiscard]] int64_t parameter_count() const noexcept;

 private:
  std::string name_;
  std::vector<std::unique_ptr<Unit>> units_;
  DataShape shape_;
  std::vector<std::vector<ParamRef>> owners_;
};

// The model named by `section.name` ("mlp" or "gpt") with `section.params`.
// Throws tessera::Error (invalid argument) naming section.params_where and
// the key for an unknown model, unknown/missing keys and bad values.
std::unique_ptr<Model> make_model(const ModelSection& section);

// One flat f32 buffer per non-tied parameter of a model (zeroed), with the
// per-unit pointer arrays a unit's forward/backward take (tied slots point
// at their owner's buffer).
class ModelParams {
 public:
  explicit ModelParams(const Model& model);
  // Not copyable (the pointer arrays point into this object's buffers);
  // moving keeps the buffers, hence the pointers, valid.
  ModelParams(const ModelParams&) = delete;
  ModelParams& operator=(const ModelParams&) = delete;
  ModelParams(ModelParams&&) noexcept = default;
  ModelParams& operator=(ModelParams&&) noexcept = default;
  ~ModelParams() = default;

  // Pointers for unit `i`, in declaration order.
  [[nodiscard]] std::span<float* const> unit(std::size_t i) { return ptrs_.at(i); }
  // The same as const pointers.
  [[nodiscard]] std::span<const float* const> unit_const(std::size_t i) const {
    return cptrs_.at(i);
  }
  // The values owned at `ref` (empty for a tied slot; use Model::owner).
  [[nodiscard]] std::span<float> at(ParamRef ref) { return buffers_.at(ref.unit).at(ref.param); }
  [[nodiscard]] std::span<const float> at(ParamRef ref) const {
    return buffers_.at(ref.unit).at(ref.param);
  }
  // Every owned value, concatenated in (unit, param) order.
  [[nodiscard]] std::vector<float> flatten() const;
  // Sets every value to zero.
  void zero();
  // Runs every unit's init with `seed`.
  void init(const Model& model, uint64_t seed);

 private:
  std::vector<std::vector<std::vector<float>>> buffers_;  // [unit][param], empty when tied
  std::vector<std::vector<float*>> ptrs_;
  std::vector<std::vector<const float*>> cptrs_;
};

// The scaled loss of `batch` (forward only, fresh contexts).
double reference_loss(const Model& model, const ModelParams& params, const Batch& batch,
                      float loss_scale);

// One reference forward and backward of `batch` in a single process: runs
// every unit forward, then backward from the head, ADDING gradients into
// `grads`. Returns the scaled loss. Errors from units propagate.
double reference_forward_backward(const Model& model, const ModelParams& params, ModelParams& grads,
                                  const Batch& batch, float loss_scale);

}  // namespace tessera::model

// A model as the host holds it: one built by a model plugin (kind `model`,
// tessera/c/model.h) from the [model] table, with its units' parameter
// declarations read once, plus parameter storage and the single-process
// reference trainer that every strategy is compared against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/c/model.h"
#include "tessera/core/config.hpp"
#include "tessera/core/data/batch.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/options.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/sdk/model.hpp"

namespace tessera::model {

using sdk::model::ConstView;
using sdk::model::ParamRef;
using sdk::model::ParamSpec;
using sdk::model::SplitHint;

// Ordered units of a plugin-built model. The first unit consumes the batch,
// the last returns the loss. Immutable after construction; forward and
// backward may run from several threads with distinct contexts.
class Model {
 public:
  // One unit's per-micro-batch context; destroys itself.
  class Context {
   public:
    Context() = default;
    Context(const tessera_model_api* api, tessera_unit_ctx* ctx) : api_(api), ctx_(ctx) {}
    Context(Context&& other) noexcept;
    Context& operator=(Context&& other) noexcept;
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    ~Context();
    [[nodiscard]] tessera_unit_ctx* raw() const noexcept { return ctx_; }
    // Bytes the context holds now (saved activations, outputs).
    [[nodiscard]] uint64_t bytes() const noexcept {
      return ctx_ != nullptr ? api_->context_bytes(ctx_) : 0;
    }

   private:
    const tessera_model_api* api_ = nullptr;
    tessera_unit_ctx* ctx_ = nullptr;
  };

  // Builds the model with `plugin`'s create from `options` (the resolved
  // [model] table). Throws tessera::Error naming `where` (e.g. "run.toml:
  // [model]") with the plugin's message when create fails or the model
  // declares something inconsistent.
  Model(std::shared_ptr<LoadedPlugin> plugin, OptionValues options, const std::string& where);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model();

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::size_t size() const noexcept { return units_.size(); }
  // Name of unit `i` ("embed", "block0", "head").
  [[nodiscard]] const std::string& unit_name(std::size_t i) const { return units_.at(i).name; }
  // Parameter declarations of unit `i`, in order. A tied slot has `tied_to`
  // set to the owner's "<unit>.<param>".
  [[nodiscard]] std::span<const ParamSpec> params(std::size_t i) const {
    return units_.at(i).params;
  }
  // TESSERA_UNIT_* bits of unit `i`.
  [[nodiscard]] uint32_t unit_flags(std::size_t i) const { return units_.at(i).flags; }
  // Estimated cost of unit `i` per example.
  [[nodiscard]] tessera_unit_cost unit_cost(std::size_t i) const;
  // The data layout the model consumes (for make_dataset and Batch::make).
  [[nodiscard]] const DataShape& data_shape() const noexcept { return shape_; }
  // Storage of parameter `param` of unit `unit` (itself unless tied).
  [[nodiscard]] ParamRef owner(std::size_t unit, std::size_t param) const;
  // Number of distinct (untied) parameter elements.
  [[nodiscard]] int64_t parameter_count() const noexcept;

  // The C table and handle, for strategies (tessera_strategy_env).
  [[nodiscard]] const tessera_model_api* api() const noexcept { return api_; }
  [[nodiscard]] const tessera_model* handle() const noexcept { return handle_; }
  // Model interface version of the plugin.
  [[nodiscard]] InterfaceVersion interface() const noexcept { return version_; }
  // The plugin library the model came from.
  [[nodiscard]] const LoadedPlugin& plugin() const noexcept { return *plugin_; }

  // Writes unit `unit`'s initial values into `params` (one pointer per slot).
  void init_unit(std::size_t unit, std::span<float* const> params, uint64_t seed) const;
  [[nodiscard]] Context make_context(std::size_t unit) const;
  // Forward of unit `unit` (see tessera_model_api::forward).
  ConstView forward(std::size_t unit, Context& ctx, std::span<const float* const> params,
                    const Batch& batch, ConstView x, float loss_scale) const;
  // Backward of unit `unit`: ADDS into `grads`, returns the input gradient.
  ConstView backward(std::size_t unit, Context& ctx, std::span<const float* const> params,
                     std::span<float* const> grads, ConstView grad_output) const;

 private:
  struct UnitInfo {
    std::string name;
    uint32_t flags = 0;
    std::vector<ParamSpec> params;
    std::vector<ParamRef> owners;
  };

  [[nodiscard]] std::string call_name(std::size_t unit, const char* what) const;

  std::shared_ptr<LoadedPlugin> plugin_;
  OptionValues options_;
  const tessera_model_api* api_ = nullptr;
  tessera_model* handle_ = nullptr;
  InterfaceVersion version_;
  std::string name_;
  std::vector<UnitInfo> units_;
  DataShape shape_;
};

// The model named by `section.name`, built by the model plugin of that name
// in `registry` from section.params (checked against the plugin's declared
// options: an unknown key names its line and the declared keys). Throws
// tessera::Error (invalid argument) naming section.params_where for an
// unknown model (listing the known ones) or a bad value.
std::unique_ptr<Model> make_model(const ModelSection& section, const PluginRegistry& registry);

// One flat f32 buffer per untied parameter of a model (zeroed), with the
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

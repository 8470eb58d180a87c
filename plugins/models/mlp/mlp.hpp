// The `mlp` reference model: dense layers with ReLU or GELU, then a linear
// classifier with softmax cross-entropy. Consumes classification batches
// (f32 inputs [B, F], int32 class targets [B]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/sdk/host.hpp"

#include "tessera/models/kernels.hpp"
#include "tessera/models/unit.hpp"

namespace tessera::model {

// Shape of an mlp: input features, hidden widths (may be empty), classes.
struct MlpConfig {
  int64_t input = 0;
  std::vector<int64_t> hidden;
  int64_t classes = 0;
  kernels::Activation activation = kernels::Activation::relu;
};

// Reads the options of an mlp (declared in plugin.cpp): `input`, `hidden`
// (list of widths), `classes`, `activation` ("relu" | "gelu"). Throws
// tessera::Error (invalid argument) naming the key for a value < 1 (classes
// < 2) or an unknown activation.
MlpConfig parse_mlp_config(const sdk::Options& options);

// y = act(x·w + b): params w [in, out] (column), b [out] (column). When
// `first`, x is the batch's inputs [B, in] and backward returns no input
// gradient; otherwise x is the previous unit's output.
class DenseUnit final : public ConventionUnit {
 public:
  DenseUnit(std::string name, int64_t in, int64_t out, kernels::Activation act, bool first);

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override;
  [[nodiscard]] UnitCost cost() const override;
  ConstView forward(UnitContext& ctx, std::span<const float* const> params,
                    const UnitInput& input) const override;
  ConstView backward(UnitContext& ctx, std::span<const float* const> params,
                     std::span<float* const> grads, ConstView grad_output) const override;
  // The split backward: the same gradients, bit for bit, in two calls.
  [[nodiscard]] uint32_t flags() const noexcept override { return TESSERA_UNIT_SPLIT_BACKWARD; }
  ConstView backward_input(UnitContext& ctx, std::span<const float* const> params,
                           ConstView grad_output) const override;
  void backward_weight(UnitContext& ctx, std::span<const float* const> params,
                       std::span<float* const> grads) const override;

 private:
  int64_t in_;
  int64_t out_;
  kernels::Activation act_;
};

// logits = x·w + b, loss = Σ_rows cross-entropy(logits, target) × loss_scale:
// params w [in, classes] (column), b [classes] (column). Reads the batch's
// class targets [B]; when `first` (no hidden layers) also its inputs.
class ClassifierHead final : public ConventionUnit {
 public:
  ClassifierHead(std::string name, int64_t in, int64_t classes, bool first);

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override;
  [[nodiscard]] UnitCost cost() const override;
  ConstView forward(UnitContext& ctx, std::span<const float* const> params,
                    const UnitInput& input) const override;
  ConstView backward(UnitContext& ctx, std::span<const float* const> params,
                     std::span<float* const> grads, ConstView grad_output) const override;
  // The split backward: the same gradients, bit for bit, in two calls.
  [[nodiscard]] uint32_t flags() const noexcept override { return TESSERA_UNIT_SPLIT_BACKWARD; }
  ConstView backward_input(UnitContext& ctx, std::span<const float* const> params,
                           ConstView grad_output) const override;
  void backward_weight(UnitContext& ctx, std::span<const float* const> params,
                       std::span<float* const> grads) const override;

 private:
  int64_t in_;
  int64_t classes_;
};

// The units of an mlp: "layer0".."layer{k-1}" (DenseUnit) then "head".
std::vector<std::unique_ptr<Unit>> build_mlp_units(const MlpConfig& config);

}  // namespace tessera::model

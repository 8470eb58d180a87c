// The `mlp` reference model: dense layers with ReLU or GELU, then a linear
// classifier with softmax cross-entropy. Consumes classification batches
// (f32 inputs [B, F], int32 class targets [B]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/sdk/host.hpp"

#include "tessera/models/cuda_units.hpp"
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

// How a dense layer splits over a tensor-parallel group of p ranks
// (Megatron's pairs): `column` splits w [in, out] and b on out, so a rank
// computes out/p output features from the whole input; `row` splits w on
// in and keeps b whole, so a rank multiplies its in/p input features (the
// column layer's output shard) and one allreduce sums the partial outputs
// before the bias.
enum class DenseSplit { column, row };

// y = act(x·w + b): params w [in, out], b [out], split as `split` says
// (column: both column; row: w row, b replicated). When `first`, x is the
// batch's inputs [B, in] and backward returns no input gradient; otherwise
// x is the previous unit's output.
//
// Under a tensor-parallel group of size p > 1 (UnitInput::tp) the unit gets
// its shards: a column layer reads the whole x and returns its [B, out/p]
// output shard (or, with `gather_output`, allgathers the shards into the
// whole [B, out] for a unit that needs all features), and its backward
// allreduces the input gradient; a row layer reads the [B, in/p] shard,
// allreduces x·w before adding b, and returns its input gradient shard
// without communication. The backward halves run in the context's group
// (UnitContext::tp), which must have the forward's size; the context's host
// supplies the reason of a failed collective. With no group or a group of 1
// the arithmetic is the single-rank one, bit for bit.
//
// Under sequence parallelism (TESSERA_TP_SEQUENCE) the examples are split
// in contiguous blocks of B/p between the pairs: a row layer
// reduce-scatters its partial products to its [B/p, out] rows, adds b and
// applies the activation there and returns them; its backward gathers the
// rows' pre-activation gradients into the whole [B, out] (for w's
// gradient) and computes b's gradient from its own rows only (this rank's
// part; the caller sums the parts). A column layer after a row layer
// gathers its [B/p, in] input rows into the whole input and
// reduce-scatters its partial input gradient back to them; the first reads
// the whole batch. A gathering column layer returns its rows [B/p, out] of
// the whole output, and its backward gathers their gradients. The first
// layer refuses a batch size p does not divide, naming both.
class DenseUnit final : public ConventionUnit {
 public:
  // `out_key` names the model option that sets `out` in errors (e.g.
  // "hidden[0]"); empty: "out".
  DenseUnit(std::string name, int64_t in, int64_t out, kernels::Activation act, bool first,
            DenseSplit split = DenseSplit::column, bool gather_output = false,
            std::string out_key = {});

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override;
  [[nodiscard]] UnitCost cost() const override;
  ConstView forward(UnitContext& ctx, std::span<const float* const> params,
                    const UnitInput& input) const override;
  ConstView backward(UnitContext& ctx, std::span<const float* const> params,
                     std::span<float* const> grads, ConstView grad_output) const override;
  // The split backward: the same gradients, bit for bit, in two calls.
  [[nodiscard]] uint32_t flags() const noexcept override {
    return TESSERA_UNIT_SPLIT_BACKWARD | TESSERA_UNIT_TENSOR_PARALLEL |
           TESSERA_UNIT_SEQUENCE_PARALLEL;
  }
  // A column layer needs `out` divisible (naming out_key); a row layer's
  // `in` is its column partner's `out`.
  void check_tensor_parallel(int32_t size, uint32_t flags) const override;
  ConstView backward_input(UnitContext& ctx, std::span<const float* const> params,
                           ConstView grad_output) const override;
  void backward_weight(UnitContext& ctx, std::span<const float* const> params,
                       std::span<float* const> grads) const override;

 private:
  int64_t in_;
  int64_t out_;
  kernels::Activation act_;
  DenseSplit split_;
  bool gather_output_;
  std::string out_key_;
};

// logits = x·w + b, loss = Σ_rows cross-entropy(logits, target) × loss_scale:
// params w [in, classes] (column), b [classes] (column). Reads the batch's
// class targets [B]; when `first` (no hidden layers) also its inputs.
//
// Under a tensor-parallel group of p > 1 ranks that divides `classes`, a
// rank holds classes/p of the classes (w and b column shards) and computes
// a parallel cross-entropy: the row maxima (one MAX allreduce) and the sums
// of exponentials with the target's logit (one SUM allreduce) are combined
// over the group (parallel_xent_forward), so no rank holds all logits; its
// backward allreduces the input gradient. When p does not divide
// `classes`, the head is replicated: the caller passes whole w and b and
// every rank computes the whole head. As for DenseUnit, the backward halves
// run in the context's group, which must have the forward's size.
//
// Under sequence parallelism x is this rank's [B/p, in] rows (a first head
// reads the whole batch). A classes-parallel head gathers them, computes
// the parallel cross-entropy of every row and reduce-scatters the partial
// input gradient back to them. A replicated head computes only its rows:
// their loss summed over the group (every rank returns the whole loss),
// their input gradient without communication, and its part of w's and
// b's gradients (the caller sums the parts). A batch size p does not
// divide is refused, naming both.
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
  [[nodiscard]] uint32_t flags() const noexcept override {
    return TESSERA_UNIT_SPLIT_BACKWARD | TESSERA_UNIT_TENSOR_PARALLEL |
           TESSERA_UNIT_SEQUENCE_PARALLEL;
  }
  ConstView backward_input(UnitContext& ctx, std::span<const float* const> params,
                           ConstView grad_output) const override;
  void backward_weight(UnitContext& ctx, std::span<const float* const> params,
                       std::span<float* const> grads) const override;

 private:
  int64_t in_;
  int64_t classes_;
};

// The units of an mlp: "layer0".."layer{k-1}" (DenseUnit) then "head".
// Hidden layers pair up for tensor parallelism: even ones column-split, odd
// ones row-split; an even last hidden layer gathers its output for the
// head.
std::vector<std::unique_ptr<Unit>> build_mlp_units(const MlpConfig& config);

// For a CUDA run: `units` (build_mlp_units') each replaced by its CUDA
// version from `factory`, which keeps the CPU unit for its parameters,
// cost and initialisation.
std::vector<std::unique_ptr<Unit>> cuda_mlp_units(const cuda::UnitFactory& factory,
                                                  const tessera_host_api* host,
                                                  const MlpConfig& config,
                                                  std::vector<std::unique_ptr<Unit>> units);

}  // namespace tessera::model

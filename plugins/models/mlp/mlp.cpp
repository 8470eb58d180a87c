// The mlp reference model's units (see mlp.hpp).
#include "mlp.hpp"

#include <algorithm>
#include <utility>

#include "tessera/models/param_reader.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {
namespace {

std::size_t capacity_bytes(std::initializer_list<const std::vector<float>*> buffers) {
  std::size_t total = 0;
  for (const auto* b : buffers) total += b->capacity() * sizeof(float);
  return total;
}

// The input rows of a unit: the batch's features when `first`, else the
// previous output. Checks the width and copies into `saved`.
int64_t take_input(const std::string& unit, bool first, int64_t width, const UnitInput& input,
                   std::vector<float>& saved) {
  if (first) {
    TESSERA_CHECK(
        input.batch != nullptr && !input.batch->is_sequence() && input.batch->features == width,
        TESSERA_ERR_INVALID_ARGUMENT, "unit '", unit, "': needs a classification batch with ",
        width, " features");
    saved.assign(input.batch->inputs.begin(), input.batch->inputs.end());
    return input.batch->size;
  }
  TESSERA_CHECK(!input.x.empty() && input.x.cols == width, TESSERA_ERR_INVALID_ARGUMENT, "unit '",
                unit, "': input has ", input.x.cols, " columns, expected ", width);
  saved.assign(input.x.data, input.x.data + input.x.rows * input.x.cols);
  return input.x.rows;
}

struct DenseContext final : UnitContext {
  int64_t rows = -1;
  bool input_grad_done = false;  // backward_input ran; backward_weight may follow
  std::vector<float> x, z, y, dz, dx;
  [[nodiscard]] std::size_t bytes() const noexcept override {
    return capacity_bytes({&x, &z, &y, &dz, &dx});
  }
};

struct MlpHeadContext final : UnitContext {
  int64_t rows = -1;
  bool input_grad_done = false;  // backward_input ran; backward_weight may follow
  float scale = 1.0f;
  float loss = 0.0f;
  std::vector<int32_t> targets;
  std::vector<float> x, probs, dlogits, dx;
  [[nodiscard]] std::size_t bytes() const noexcept override {
    return capacity_bytes({&x, &probs, &dlogits, &dx}) + targets.capacity() * sizeof(int32_t);
  }
};

}  // namespace

MlpConfig parse_mlp_config(const sdk::Options& options) {
  const ParamReader reader(options);
  MlpConfig config;
  config.input = reader.integer("input", 1);
  config.hidden = reader.integers("hidden", 1);
  config.classes = reader.integer("classes", 2);
  config.activation = reader.choice("activation", {"relu", "gelu"}) == "gelu"
                          ? kernels::Activation::gelu
                          : kernels::Activation::relu;
  return config;
}

DenseUnit::DenseUnit(std::string name, int64_t in, int64_t out, kernels::Activation act, bool first)
    : ConventionUnit(std::move(name), first, false), in_(in), out_(out), act_(act) {
  specs_.push_back({"w", {in, out}, SplitHint::column, {}});
  specs_.push_back({"b", {out}, SplitHint::column, {}});
}

UnitCost DenseUnit::cost() const {
  const auto in = static_cast<double>(in_);
  const auto out = static_cast<double>(out_);
  UnitCost c;
  c.forward_flops = 2.0 * in * out + 2.0 * out;  // GEMM, bias, activation
  c.backward_flops = (is_first() ? 2.0 : 4.0) * in * out + 2.0 * out;
  c.activation_bytes = 4.0 * (in + 2.0 * out);  // x, pre-activation, output
  return c;
}

std::unique_ptr<UnitContext> DenseUnit::make_context() const {
  return std::make_unique<DenseContext>();
}

ConstView DenseUnit::forward(UnitContext& ctx_base, std::span<const float* const> params,
                             const UnitInput& input) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& ctx = dynamic_cast<DenseContext&>(ctx_base);
  const int64_t n = take_input(name_, is_first(), in_, input, ctx.x);
  ctx.rows = n;
  ctx.input_grad_done = false;  // a new forward: the old input half no longer applies
  ctx.z.resize(static_cast<std::size_t>(n * out_));
  ctx.y.resize(ctx.z.size());
  kernels::linear_forward(ctx.x.data(), params[0], params[1], n, in_, out_, ctx.z.data());
  kernels::activation_forward(act_, ctx.z.data(), n * out_, ctx.y.data());
  return {ctx.y.data(), n, out_};
}

ConstView DenseUnit::backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                                    ConstView grad_output) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& ctx = dynamic_cast<DenseContext&>(ctx_base);
  TESSERA_CHECK(ctx.rows >= 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward without a forward on this context");
  const int64_t n = ctx.rows;
  TESSERA_CHECK(!grad_output.empty() && grad_output.rows == n && grad_output.cols == out_,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': output gradient is ",
                grad_output.rows, "x", grad_output.cols, ", expected ", n, "x", out_);
  ctx.dz.resize(static_cast<std::size_t>(n * out_));
  kernels::activation_backward(act_, ctx.z.data(), grad_output.data, n * out_, ctx.dz.data());
  ctx.input_grad_done = true;
  if (is_first()) return {};
  ctx.dx.resize(static_cast<std::size_t>(n * in_));
  kernels::gemm(false, true, n, in_, out_, 1.0f, ctx.dz.data(), out_, params[0], out_, 0.0f,
                ctx.dx.data(), in_);
  return {ctx.dx.data(), n, in_};
}

void DenseUnit::backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                                std::span<float* const> grads) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  auto& ctx = dynamic_cast<DenseContext&>(ctx_base);
  TESSERA_CHECK(ctx.input_grad_done, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward_weight without backward_input on this context");
  kernels::linear_backward(ctx.x.data(), params[0], ctx.dz.data(), ctx.rows, in_, out_, grads[0],
                           grads[1], nullptr);
  ctx.input_grad_done = false;
}

ConstView DenseUnit::backward(UnitContext& ctx_base, std::span<const float* const> params,
                              std::span<float* const> grads, ConstView grad_output) const {
  // The two halves in order: the same bits as one pass, as the halves
  // compute disjoint outputs from the same saved tensors.
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  const ConstView grad_input = backward_input(ctx_base, params, grad_output);
  backward_weight(ctx_base, params, grads);
  return grad_input;
}

ClassifierHead::ClassifierHead(std::string name, int64_t in, int64_t classes, bool first)
    : ConventionUnit(std::move(name), first, true), in_(in), classes_(classes) {
  specs_.push_back({"w", {in, classes}, SplitHint::column, {}});
  specs_.push_back({"b", {classes}, SplitHint::column, {}});
}

UnitCost ClassifierHead::cost() const {
  const auto in = static_cast<double>(in_);
  const auto k = static_cast<double>(classes_);
  UnitCost c;
  c.forward_flops = 2.0 * in * k + 5.0 * k;  // GEMM, bias, softmax
  c.backward_flops = (is_first() ? 2.0 : 4.0) * in * k + 2.0 * k;
  c.activation_bytes = 4.0 * (in + k);  // x, probabilities
  return c;
}

std::unique_ptr<UnitContext> ClassifierHead::make_context() const {
  return std::make_unique<MlpHeadContext>();
}

ConstView ClassifierHead::forward(UnitContext& ctx_base, std::span<const float* const> params,
                                  const UnitInput& input) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& ctx = dynamic_cast<MlpHeadContext&>(ctx_base);
  const int64_t n = take_input(name_, is_first(), in_, input, ctx.x);
  TESSERA_CHECK(input.batch != nullptr && !input.batch->is_sequence() &&
                    static_cast<int64_t>(input.batch->targets.size()) == n,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': needs a classification batch with one target per row (", n, " rows)");
  ctx.rows = n;
  ctx.input_grad_done = false;  // a new forward: the old input half no longer applies
  ctx.scale = input.loss_scale;
  ctx.targets.assign(input.batch->targets.begin(), input.batch->targets.end());
  ctx.probs.resize(static_cast<std::size_t>(n * classes_));
  kernels::linear_forward(ctx.x.data(), params[0], params[1], n, in_, classes_, ctx.probs.data());
  const double loss = kernels::softmax_xent_forward(ctx.probs.data(), ctx.targets.data(), n,
                                                    classes_, ctx.probs.data(), name_);
  ctx.loss = static_cast<float>(loss * input.loss_scale);
  return {&ctx.loss, 1, 1};
}

ConstView ClassifierHead::backward_input(UnitContext& ctx_base,
                                         std::span<const float* const> params,
                                         ConstView grad_output) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& ctx = dynamic_cast<MlpHeadContext&>(ctx_base);
  TESSERA_CHECK(ctx.rows >= 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward without a forward on this context");
  const int64_t n = ctx.rows;
  const float g = grad_output.empty() ? 1.0f : grad_output.data[0];
  ctx.dlogits.resize(static_cast<std::size_t>(n * classes_));
  kernels::softmax_xent_backward(ctx.probs.data(), ctx.targets.data(), n, classes_, ctx.scale * g,
                                 ctx.dlogits.data());
  ctx.input_grad_done = true;
  if (is_first()) return {};
  ctx.dx.resize(static_cast<std::size_t>(n * in_));
  kernels::gemm(false, true, n, in_, classes_, 1.0f, ctx.dlogits.data(), classes_, params[0],
                classes_, 0.0f, ctx.dx.data(), in_);
  return {ctx.dx.data(), n, in_};
}

void ClassifierHead::backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                                     std::span<float* const> grads) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  auto& ctx = dynamic_cast<MlpHeadContext&>(ctx_base);
  TESSERA_CHECK(ctx.input_grad_done, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward_weight without backward_input on this context");
  kernels::linear_backward(ctx.x.data(), params[0], ctx.dlogits.data(), ctx.rows, in_, classes_,
                           grads[0], grads[1], nullptr);
  ctx.input_grad_done = false;
}

ConstView ClassifierHead::backward(UnitContext& ctx_base, std::span<const float* const> params,
                                   std::span<float* const> grads, ConstView grad_output) const {
  // The two halves in order: the same bits as one pass, as the halves
  // compute disjoint outputs from the same saved tensors.
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  const ConstView grad_input = backward_input(ctx_base, params, grad_output);
  backward_weight(ctx_base, params, grads);
  return grad_input;
}

std::vector<std::unique_ptr<Unit>> build_mlp_units(const MlpConfig& config) {
  std::vector<std::unique_ptr<Unit>> units;
  int64_t width = config.input;
  for (std::size_t i = 0; i < config.hidden.size(); ++i) {
    units.push_back(std::make_unique<DenseUnit>("layer" + std::to_string(i), width,
                                                config.hidden[i], config.activation, i == 0));
    width = config.hidden[i];
  }
  units.push_back(
      std::make_unique<ClassifierHead>("head", width, config.classes, config.hidden.empty()));
  return units;
}

}  // namespace tessera::model

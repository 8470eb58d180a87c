// The mlp reference model's units (see mlp.hpp).
#include "mlp.hpp"

#include <algorithm>
#include <utility>

#include "tessera/models/param_reader.hpp"
#include "tessera/models/tensor_parallel.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {
namespace {

std::size_t capacity_bytes(std::initializer_list<const std::vector<float>*> buffers) {
  std::size_t total = 0;
  for (const auto* b : buffers) total += b->capacity() * sizeof(float);
  return total;
}

// A first unit's batch: classification, `width` features.
void check_features(const std::string& unit, int64_t width, const UnitInput& input) {
  TESSERA_CHECK(
      input.batch != nullptr && !input.batch->is_sequence() && input.batch->features == width,
      TESSERA_ERR_INVALID_ARGUMENT, "unit '", unit, "': needs a classification batch with ", width,
      " features");
}

// The input rows of a unit: the batch's features when `first`, else the
// previous output. Checks the width and copies into `saved`.
int64_t take_input(const std::string& unit, bool first, int64_t width, const UnitInput& input,
                   std::vector<float>& saved) {
  if (first) {
    check_features(unit, width, input);
    saved.assign(input.batch->inputs.begin(), input.batch->inputs.end());
    return input.batch->size;
  }
  TESSERA_CHECK(!input.x.empty() && input.x.cols == width, TESSERA_ERR_INVALID_ARGUMENT, "unit '",
                unit, "': input has ", input.x.cols, " columns, expected ", width);
  saved.assign(input.x.data, input.x.data + input.x.rows * input.x.cols);
  return input.x.rows;
}

// The whole input rows of a unit under sequence parallelism, where the
// previous unit passed this rank's slice of the examples: gathered into
// `saved` [rows · p, width]. Returns the whole rows.
int64_t gather_input(const std::string& unit, int64_t width, const UnitInput& input,
                     const TpGroup& tp, std::vector<float>& saved) {
  TESSERA_CHECK(!input.x.empty() && input.x.cols == width, TESSERA_ERR_INVALID_ARGUMENT, "unit '",
                unit, "': input has ", input.x.cols, " columns, expected ", width);
  const int64_t n = input.x.rows * tp.size();
  saved.resize(static_cast<std::size_t>(n * width));
  tp.gather_rows(input.x.data, 1, input.x.rows, width, saved.data(), "the input rows");
  return n;
}

// A first unit's rows under sequence parallelism: this rank's examples of
// the batch, from example `row0` on, into `saved`. Returns how many.
int64_t take_local_batch(const std::string& unit, int64_t width, const UnitInput& input,
                         const TpGroup& tp, std::vector<float>& saved, int64_t& row0) {
  check_features(unit, width, input);
  const int64_t n = tp.local_positions("the batch size", input.batch->size);
  row0 = static_cast<int64_t>(tp.rank()) * n;
  const auto from = input.batch->inputs.begin() + row0 * width;
  saved.assign(from, from + n * width);
  return n;
}

struct DenseContext final : UnitContext {
  int64_t rows = -1;
  bool input_grad_done = false;  // backward_input ran; backward_weight may follow
  int32_t tp_size = 1;           // the forward's group size (backward's must match)
  bool sequence = false;         // the forward split the examples (TESSERA_TP_SEQUENCE)
  std::vector<float> x, z, y, dz, dx;
  std::vector<float> gathered, out, dy;  // a column layer that gathers its output
  [[nodiscard]] std::size_t bytes() const noexcept override {
    return capacity_bytes({&x, &z, &y, &dz, &dx, &gathered, &out, &dy});
  }
};

struct MlpHeadContext final : UnitContext {
  int64_t rows = -1;
  bool input_grad_done = false;  // backward_input ran; backward_weight may follow
  int32_t tp_size = 1;           // the forward's group size (backward's must match)
  bool parallel = false;         // classes-parallel in that group
  bool sequence = false;         // the forward split the examples (TESSERA_TP_SEQUENCE)
  int64_t first_class = 0;       // this rank's first class
  int64_t local_classes = 0;     // and how many it holds
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
  double count = 0.0;
  double in = static_cast<double>(config.input);
  for (const int64_t width : config.hidden) {
    count += (in + 1) * static_cast<double>(width);
    in = static_cast<double>(width);
  }
  reader.parameters(count + (in + 1) * static_cast<double>(config.classes),
                    "'input', 'hidden' and 'classes'");
  config.activation = reader.choice("activation", {"relu", "gelu"}) == "gelu"
                          ? kernels::Activation::gelu
                          : kernels::Activation::relu;
  return config;
}

DenseUnit::DenseUnit(std::string name, int64_t in, int64_t out, kernels::Activation act, bool first,
                     DenseSplit split, bool gather_output, std::string out_key)
    : ConventionUnit(std::move(name), first, false),
      in_(in),
      out_(out),
      act_(act),
      split_(split),
      gather_output_(gather_output && split == DenseSplit::column),
      out_key_(out_key.empty() ? "out" : std::move(out_key)) {
  const bool row = split_ == DenseSplit::row;
  specs_.push_back({"w", {in, out}, row ? SplitHint::row : SplitHint::column, {}});
  specs_.push_back({"b", {out}, row ? SplitHint::none : SplitHint::column, {}});
}

void DenseUnit::check_tensor_parallel(int32_t size, uint32_t flags) const {
  if (split_ == DenseSplit::column) {
    TpGroup::for_check(size, flags, name_).require_divisible(out_key_, out_);
  }
}

UnitCost DenseUnit::cost() const {
  const auto in = static_cast<double>(in_);
  const auto out = static_cast<double>(out_);
  UnitCost c;
  c.forward_flops = 2.0 * in * out + 2.0 * out;  // GEMM, bias, activation
  c.backward_flops = (is_first() ? 2.0 : 4.0) * in * out + 2.0 * out;
  // Per example after forward and backward (p ranks of a tensor group):
  // a column layer holds its input x whole, out/p of the pre-activation,
  // the output and their gradient, and (unless first) the input gradient,
  // whole in tensor mode and its rows in sequence mode; a row layer holds
  // in/p of x and its gradient, the pre-activation and output (its rows in
  // sequence mode) and the whole pre-activation gradient. A gathering
  // column layer's gathered output (2·out, plus out/p of its gradient) is
  // held only with p > 1 and is not counted.
  if (split_ == DenseSplit::column) {
    set_activations(c, 3.0 * out, is_first() ? 0.0 : in, in, out);
  } else {
    set_activations(c, 2.0 * in, 2.0 * out, out, out);
  }
  return c;
}

std::unique_ptr<UnitContext> DenseUnit::make_context() const {
  return std::make_unique<DenseContext>();
}

ConstView DenseUnit::forward(UnitContext& ctx_base, std::span<const float* const> params,
                             const UnitInput& input) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& ctx = dynamic_cast<DenseContext&>(ctx_base);
  const TpGroup tp(input.tp, ctx_base.host(), name_);
  const int32_t p = tp.size();
  ctx.tp_size = p;
  ctx.sequence = tp.sequence();
  ctx.input_grad_done = false;  // a new forward: the old input half no longer applies
  if (!tp.active()) {
    const int64_t n = take_input(name_, is_first(), in_, input, ctx.x);
    ctx.rows = n;
    ctx.z.resize(static_cast<std::size_t>(n * out_));
    ctx.y.resize(ctx.z.size());
    kernels::linear_forward(ctx.x.data(), params[0], params[1], n, in_, out_, ctx.z.data());
    kernels::activation_forward(act_, ctx.z.data(), n * out_, ctx.y.data());
    return {ctx.y.data(), n, out_};
  }
  if (split_ == DenseSplit::row) {
    // x is the previous column layer's shard; the partial products are
    // summed over the group before the (whole) bias.
    const int64_t in = in_ / p;
    const int64_t n = take_input(name_, is_first(), in, input, ctx.x);
    ctx.rows = n;
    if (tp.sequence()) {
      // The sum is scattered: this rank keeps its examples' rows, and the
      // bias and activation run on them only.
      const int64_t local = tp.local_positions("the batch size", n);
      std::vector<float> partial(static_cast<std::size_t>(n * out_));
      kernels::linear_forward(ctx.x.data(), params[0], nullptr, n, in, out_, partial.data());
      ctx.z.resize(static_cast<std::size_t>(local * out_));
      ctx.y.resize(ctx.z.size());
      tp.scatter_rows_sum(partial.data(), 1, local, out_, ctx.z.data(), "the partial products");
      for (int64_t r = 0; r < local; ++r) {
        kernels::add_into(ctx.z.data() + r * out_, params[1], out_);
      }
      kernels::activation_forward(act_, ctx.z.data(), local * out_, ctx.y.data());
      return {ctx.y.data(), local, out_};
    }
    ctx.z.resize(static_cast<std::size_t>(n * out_));
    ctx.y.resize(ctx.z.size());
    kernels::linear_forward(ctx.x.data(), params[0], nullptr, n, in, out_, ctx.z.data());
    tp.allreduce_sum(ctx.z.data(), n * out_, "the partial products");
    for (int64_t r = 0; r < n; ++r) kernels::add_into(ctx.z.data() + r * out_, params[1], out_);
    kernels::activation_forward(act_, ctx.z.data(), n * out_, ctx.y.data());
    return {ctx.y.data(), n, out_};
  }
  const int64_t out = out_ / p;
  // Under sequence parallelism a column layer after a row layer gets its
  // examples' rows and gathers the whole input (kept for the weight
  // gradient); the first reads the whole batch either way.
  const int64_t n = tp.sequence() && !is_first() ? gather_input(name_, in_, input, tp, ctx.x)
                                                 : take_input(name_, is_first(), in_, input, ctx.x);
  const int64_t local = tp.local_positions("the batch size", n);
  ctx.rows = n;
  ctx.z.resize(static_cast<std::size_t>(n * out));
  ctx.y.resize(ctx.z.size());
  kernels::linear_forward(ctx.x.data(), params[0], params[1], n, in_, out, ctx.z.data());
  kernels::activation_forward(act_, ctx.z.data(), n * out, ctx.y.data());
  if (!gather_output_) return {ctx.y.data(), n, out};
  if (tp.sequence()) {
    // Whole features of this rank's examples only: rows [rank · local,
    // (rank+1) · local) of every rank's block, side by side.
    std::vector<float> blocks(static_cast<std::size_t>(n * out_));
    tp.allgather(ctx.y.data(), n * out, blocks.data(), "the output shards");
    const int64_t lo = static_cast<int64_t>(tp.rank()) * local;
    ctx.out.resize(static_cast<std::size_t>(local * out_));
    for (int64_t k = 0; k < p; ++k) {
      for (int64_t r = 0; r < local; ++r) {
        const float* from = blocks.data() + (k * n + lo + r) * out;
        std::copy(from, from + out, ctx.out.data() + r * out_ + k * out);
      }
    }
    return {ctx.out.data(), local, out_};
  }
  // Block k of the allgather is rank k's [n, out/p]; the whole output puts
  // it at columns [k out/p, (k+1) out/p) of every row.
  ctx.gathered.resize(static_cast<std::size_t>(n * out_));
  tp.allgather(ctx.y.data(), n * out, ctx.gathered.data(), "the output shards");
  ctx.out.resize(ctx.gathered.size());
  for (int64_t k = 0; k < p; ++k) {
    for (int64_t r = 0; r < n; ++r) {
      const float* from = ctx.gathered.data() + (k * n + r) * out;
      std::copy(from, from + out, ctx.out.data() + r * out_ + k * out);
    }
  }
  return {ctx.out.data(), n, out_};
}

ConstView DenseUnit::backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                                    ConstView grad_output) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& ctx = dynamic_cast<DenseContext&>(ctx_base);
  TESSERA_CHECK(ctx.rows >= 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward without a forward on this context");
  const TpGroup tp = TpGroup::for_backward(ctx.tp(), ctx.host(), name_, ctx.tp_size, "backward");
  tp.require_sequence(ctx.sequence, "backward");
  const int64_t n = ctx.rows;
  const int32_t p = tp.size();
  const bool column = split_ == DenseSplit::column;
  const bool sequence = ctx.sequence;
  // This rank's rows of the examples under sequence parallelism.
  const int64_t local = sequence ? n / p : n;
  // Widths of this rank's z and x.
  const int64_t out = column ? out_ / p : out_;
  const int64_t in = column ? in_ : in_ / p;
  // The gradient has the forward output's shape.
  const bool gathered = column && p > 1 && gather_output_;
  const int64_t grad_cols = column && !gathered ? out : out_;
  const int64_t grad_rows = sequence && (!column || gathered) ? local : n;
  TESSERA_CHECK(
      !grad_output.empty() && grad_output.rows == grad_rows && grad_output.cols == grad_cols,
      TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': output gradient is ", grad_output.rows,
      "x", grad_output.cols, ", expected ", grad_rows, "x", grad_cols);
  const float* dy = grad_output.data;
  if (sequence && !column) {
    // Row layer: the activation's backward on this rank's rows, then the
    // whole pre-activation gradient (kept for the weight gradient) from
    // every rank's rows; the input gradient shard needs no more.
    std::vector<float> dz(static_cast<std::size_t>(local * out));
    kernels::activation_backward(act_, ctx.z.data(), dy, local * out, dz.data());
    ctx.dz.resize(static_cast<std::size_t>(n * out));
    tp.gather_rows(dz.data(), 1, local, out, ctx.dz.data(), "the output gradient rows");
  } else {
    std::vector<float> whole;  // a gathering column layer's whole output gradient
    if (sequence && gathered) {
      whole.resize(static_cast<std::size_t>(n * out_));
      tp.gather_rows(dy, 1, local, out_, whole.data(), "the output gradient rows");
      dy = whole.data();
    }
    if (grad_cols != out) {
      // Gathered output: this rank's columns of the whole gradient.
      ctx.dy.resize(static_cast<std::size_t>(n * out));
      const int64_t first = static_cast<int64_t>(tp.rank()) * out;
      for (int64_t r = 0; r < n; ++r) {
        const float* from = dy + r * out_ + first;
        std::copy(from, from + out, ctx.dy.data() + r * out);
      }
      dy = ctx.dy.data();
    }
    ctx.dz.resize(static_cast<std::size_t>(n * out));
    kernels::activation_backward(act_, ctx.z.data(), dy, n * out, ctx.dz.data());
  }
  ctx.input_grad_done = true;
  if (is_first()) return {};
  if (sequence && column) {
    // The input's rows were gathered: every rank's partial gradient of
    // them is summed onto the rank that holds them.
    std::vector<float> partial(static_cast<std::size_t>(n * in));
    kernels::gemm(false, true, n, in, out, 1.0f, ctx.dz.data(), out, params[0], out, 0.0f,
                  partial.data(), in);
    ctx.dx.resize(static_cast<std::size_t>(local * in));
    tp.scatter_rows_sum(partial.data(), 1, local, in, ctx.dx.data(), "the input gradient");
    return {ctx.dx.data(), local, in};
  }
  ctx.dx.resize(static_cast<std::size_t>(n * in));
  kernels::gemm(false, true, n, in, out, 1.0f, ctx.dz.data(), out, params[0], out, 0.0f,
                ctx.dx.data(), in);
  // A column layer's input feeds every rank's shard: its gradient is the sum.
  if (column) tp.allreduce_sum(ctx.dx.data(), n * in, "the input gradient");
  return {ctx.dx.data(), n, in};
}

void DenseUnit::backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                                std::span<float* const> grads) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  auto& ctx = dynamic_cast<DenseContext&>(ctx_base);
  TESSERA_CHECK(ctx.input_grad_done, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward_weight without backward_input on this context");
  const TpGroup tp =
      TpGroup::for_backward(ctx.tp(), ctx.host(), name_, ctx.tp_size, "backward_weight");
  tp.require_sequence(ctx.sequence, "backward_weight");
  const int32_t p = tp.size();
  const bool column = split_ == DenseSplit::column;
  if (ctx.sequence && !column) {
    // The replicated bias: this rank's part, from its examples' rows only
    // (the caller sums the parts over the group).
    const int64_t local = ctx.rows / p;
    kernels::linear_backward(ctx.x.data(), params[0], ctx.dz.data(), ctx.rows, in_ / p, out_,
                             grads[0], nullptr, nullptr);
    const float* rows = ctx.dz.data() + static_cast<int64_t>(tp.rank()) * local * out_;
    for (int64_t r = 0; r < local; ++r) kernels::add_into(grads[1], rows + r * out_, out_);
    ctx.input_grad_done = false;
    return;
  }
  kernels::linear_backward(ctx.x.data(), params[0], ctx.dz.data(), ctx.rows, column ? in_ : in_ / p,
                           column ? out_ / p : out_, grads[0], grads[1], nullptr);
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
  // Per example after forward and backward: the probabilities and their
  // gradient (split by class when the group divides the classes), the
  // input gradient unless first (its rows in sequence mode), the input
  // and the target (whole).
  set_activations(c, 2.0 * k, is_first() ? 0.0 : in, in + 1.0, 0.0);
  return c;
}

std::unique_ptr<UnitContext> ClassifierHead::make_context() const {
  return std::make_unique<MlpHeadContext>();
}

ConstView ClassifierHead::forward(UnitContext& ctx_base, std::span<const float* const> params,
                                  const UnitInput& input) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& ctx = dynamic_cast<MlpHeadContext&>(ctx_base);
  // Classes-parallel when the group divides the classes: the logits of
  // this rank's classes only, and a parallel cross-entropy over the group
  // (parallel_xent_forward). Otherwise the caller passed the whole head
  // (replicated) and every rank computes it without communication.
  const TpGroup group(input.tp, ctx_base.host(), name_);
  const bool parallel = group.active() && classes_ % group.size() == 0;
  const bool sequence = group.sequence();
  // Rows this unit computes, from example `row0` of the batch on: under
  // sequence parallelism a classes-parallel head gathers every rank's rows
  // (a first one reads them all), a replicated one keeps this rank's.
  int64_t n = 0;
  int64_t row0 = 0;
  if (sequence && parallel && !is_first()) {
    n = gather_input(name_, in_, input, group, ctx.x);
  } else if (sequence && !parallel && is_first()) {
    n = take_local_batch(name_, in_, input, group, ctx.x, row0);
  } else {
    n = take_input(name_, is_first(), in_, input, ctx.x);
    if (sequence && !parallel) row0 = static_cast<int64_t>(group.rank()) * n;
  }
  const int64_t batch_rows = sequence && !parallel ? n * group.size() : n;
  TESSERA_CHECK(input.batch != nullptr && !input.batch->is_sequence() &&
                    static_cast<int64_t>(input.batch->targets.size()) == batch_rows,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': needs a classification batch with one target per row (", batch_rows, " rows)");
  (void)group.local_positions("the batch size", batch_rows);
  ctx.rows = n;
  ctx.input_grad_done = false;  // a new forward: the old input half no longer applies
  ctx.scale = input.loss_scale;
  ctx.targets.assign(input.batch->targets.begin() + row0, input.batch->targets.begin() + row0 + n);
  ctx.tp_size = group.size();
  ctx.parallel = parallel;
  ctx.sequence = sequence;
  const TpGroup tp = ctx.parallel ? group : TpGroup();
  ctx.local_classes = classes_ / tp.size();
  ctx.first_class = static_cast<int64_t>(tp.rank()) * ctx.local_classes;
  const int64_t c = ctx.local_classes;
  ctx.probs.resize(static_cast<std::size_t>(n * c));
  kernels::linear_forward(ctx.x.data(), params[0], params[1], n, in_, c, ctx.probs.data());
  const double loss = parallel_xent_forward(tp, ctx.probs.data(), ctx.targets.data(), n, c,
                                            ctx.first_class, classes_, ctx.probs.data(), name_);
  ctx.loss = static_cast<float>(loss * input.loss_scale);
  // A replicated head under sequence parallelism has its rows' loss: every
  // rank returns the whole.
  if (sequence && !parallel) group.allreduce_sum(&ctx.loss, 1, "the loss");
  return {&ctx.loss, 1, 1};
}

ConstView ClassifierHead::backward_input(UnitContext& ctx_base,
                                         std::span<const float* const> params,
                                         ConstView grad_output) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& ctx = dynamic_cast<MlpHeadContext&>(ctx_base);
  TESSERA_CHECK(ctx.rows >= 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward without a forward on this context");
  const TpGroup group = TpGroup::for_backward(ctx.tp(), ctx.host(), name_, ctx.tp_size, "backward");
  group.require_sequence(ctx.sequence, "backward");
  const TpGroup tp = ctx.parallel ? group : TpGroup();
  const int64_t n = ctx.rows;
  const int64_t c = ctx.local_classes;
  const float g = grad_output.empty() ? 1.0f : grad_output.data[0];
  ctx.dlogits.resize(static_cast<std::size_t>(n * c));
  parallel_xent_backward(ctx.probs.data(), ctx.targets.data(), n, c, ctx.first_class, ctx.scale * g,
                         ctx.dlogits.data());
  ctx.input_grad_done = true;
  if (is_first()) return {};
  if (ctx.sequence && ctx.parallel) {
    // The input's rows were gathered: every rank's partial gradient of
    // them is summed onto the rank that holds them.
    const int64_t local = n / tp.size();
    std::vector<float> partial(static_cast<std::size_t>(n * in_));
    kernels::gemm(false, true, n, in_, c, 1.0f, ctx.dlogits.data(), c, params[0], c, 0.0f,
                  partial.data(), in_);
    ctx.dx.resize(static_cast<std::size_t>(local * in_));
    tp.scatter_rows_sum(partial.data(), 1, local, in_, ctx.dx.data(), "the head's input gradient");
    return {ctx.dx.data(), local, in_};
  }
  ctx.dx.resize(static_cast<std::size_t>(n * in_));
  kernels::gemm(false, true, n, in_, c, 1.0f, ctx.dlogits.data(), c, params[0], c, 0.0f,
                ctx.dx.data(), in_);
  tp.allreduce_sum(ctx.dx.data(), n * in_, "the head's input gradient");
  return {ctx.dx.data(), n, in_};
}

void ClassifierHead::backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                                     std::span<float* const> grads) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  auto& ctx = dynamic_cast<MlpHeadContext&>(ctx_base);
  TESSERA_CHECK(ctx.input_grad_done, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward_weight without backward_input on this context");
  const TpGroup group =
      TpGroup::for_backward(ctx.tp(), ctx.host(), name_, ctx.tp_size, "backward_weight");
  group.require_sequence(ctx.sequence, "backward_weight");
  // A replicated head under sequence parallelism: this rank's rows give its
  // part of the gradients (the caller sums the parts over the group).
  kernels::linear_backward(ctx.x.data(), params[0], ctx.dlogits.data(), ctx.rows, in_,
                           ctx.local_classes, grads[0], grads[1], nullptr);
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
  const std::size_t k = config.hidden.size();
  for (std::size_t i = 0; i < k; ++i) {
    const DenseSplit split = i % 2 == 0 ? DenseSplit::column : DenseSplit::row;
    units.push_back(std::make_unique<DenseUnit>("layer" + std::to_string(i), width,
                                                config.hidden[i], config.activation, i == 0, split,
                                                i + 1 == k, "hidden[" + std::to_string(i) + "]"));
    width = config.hidden[i];
  }
  units.push_back(
      std::make_unique<ClassifierHead>("head", width, config.classes, config.hidden.empty()));
  return units;
}

std::vector<std::unique_ptr<Unit>> cuda_mlp_units(const cuda::UnitFactory& factory,
                                                  const tessera_host_api* host,
                                                  const MlpConfig& config,
                                                  std::vector<std::unique_ptr<Unit>> units) {
  const cuda::UnitActivation act = config.activation == kernels::Activation::gelu
                                       ? cuda::UnitActivation::gelu
                                       : cuda::UnitActivation::relu;
  int64_t width = config.input;
  for (std::size_t i = 0; i < config.hidden.size(); ++i) {
    // As build_mlp_units: the last hidden layer gathers its output if it is
    // a column layer.
    units[i] = factory.dense(host, std::move(units[i]), width, config.hidden[i], act,
                             i + 1 == config.hidden.size());
    width = config.hidden[i];
  }
  units.back() = factory.classifier(host, std::move(units.back()), width, config.classes);
  return units;
}

}  // namespace tessera::model

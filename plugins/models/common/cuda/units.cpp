// The CUDA units of the mlp (see tessera/models/cuda_units.hpp) and the
// module's entry: GEMMs through cuBLASLt in plain f32 unless the run asks
// for TF32 or 16-bit products (so by default a CUDA run matches the CPU
// one to float rounding), the bias and a GELU fused into them, the other
// activations and the cross-entropy in device_kernels.cu.
// Each call runs on its thread's stream of the rank's device and returns
// once the device is done, so what it hands back may be read by the host.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "device_support.hpp"
#include "tessera/models/tensor_parallel.hpp"

namespace tessera::model::cuda {
namespace {

// Under a tensor-parallel group the units split as their CPU twins do (see
// mlp.cpp), Megatron's column and row layers and a classes-parallel head,
// with or without sequence parallelism (the examples split in blocks
// between the pairs). What goes through the group is managed memory (a
// CPU backend reads it on the host, nccl takes it as CUDA buffers:
// TpGroup), and the unit's stream is synchronised before every collective.

// The input gradient dy·wᵀ [n, in] of a product whose weight `w` [in,
// out] is this rank's; with `summed` (the product is split by its output
// columns, so each rank's is a partial sum) summed over the group: under
// sequence parallelism onto the rank that holds each row (n / size() of
// them), else on every rank. `partial` and `dx` are the context's managed
// arrays.
ConstView product_input_gradient(const TpGroup& tp, bool summed, Lane& l, const float* dy,
                                 const float* w, int64_t n, int64_t in, int64_t out,
                                 DeviceArray& partial, DeviceArray& dx, std::string_view what,
                                 const std::string& unit) {
  const bool scattered = summed && tp.sequence();
  float* full = (scattered ? partial : dx).ensure(static_cast<size_t>(n * in), l, unit);
  gemm(l, false, true, n, in, out, 1.0f, dy, out, w, out, 0.0f, full, in, unit);
  finish_call(l, unit);
  if (scattered) {
    const int64_t local = n / tp.size();
    float* mine = dx.ensure(static_cast<size_t>(local * in), l, unit);
    tp.scatter_rows_sum(full, 1, local, in, mine, what);
    return {mine, local, in};
  }
  if (summed) tp.allreduce_sum(full, n * in, what);
  return {full, n, in};
}

// z = x·w + b [n, out] (x [n, in], w [in, out]; b may be null) and y =
// act(z): a GELU fused into the product with its bias, which writes z for
// the backward beside y; another activation applied to the biased product.
void product_bias_activation(Lane& l, int64_t n, int64_t out, int64_t in, In x, const float* w,
                             const float* b, float* z, float* y, Act act, const std::string& unit) {
  if (act == Act::gelu && b != nullptr) {
    gemm(l, false, false, n, out, in, 1.0f, x, in, w, out, 0.0f, y, out, unit,
         {.kind = Fused::gelu_bias, .bias = b, .aux = z});
    return;
  }
  gemm(l, false, false, n, out, in, 1.0f, x, in, w, out, 0.0f, z, out, unit,
       {.kind = b != nullptr ? Fused::bias : Fused::none, .bias = b});
  bias_activation(z, nullptr, y, n, out, act, l.stream);
}

// The whole input rows of a unit under sequence parallelism, where the
// previous unit passed this rank's slice of the examples: gathered through
// `recv` (managed) into `saved`. Returns the whole rows.
int64_t gather_input(const Unit& unit, int64_t width, const UnitInput& input, const TpGroup& tp,
                     DeviceArray& recv, DeviceArray& saved, const Lane& l) {
  const std::string& name = unit.name();
  TESSERA_CHECK(!input.x.empty() && input.x.cols == width, TESSERA_ERR_INVALID_ARGUMENT, "unit '",
                name, "': input has ", input.x.cols, " columns, expected ", width);
  const int64_t n = input.x.rows * tp.size();
  const auto count = static_cast<size_t>(n * width);
  float* whole = recv.ensure(count, l, name);
  tp.gather_rows(input.x.data, 1, input.x.rows, width, whole, "the input rows");
  copy_device(saved.ensure(count, l, name), whole, count, l, name);
  return n;
}

struct DenseContext final : UnitContext {
  int64_t rows = -1;
  bool input_grad_done = false;
  int32_t tp_size = 1;    // the forward's group size (backward's must match)
  bool sequence = false;  // the forward split the examples (TESSERA_TP_SEQUENCE)
  Operands params;
  GradTargets grads;
  KeptOperand x;  // the product's input alone (16-bit under bf16 or f16)
  DeviceArray z, dz, staging_dy, dy_cols;
  DeviceArray y{true}, dx{true};
  // Exchanged with the group: partial sums and what is sent, what comes
  // back, and a gathering column layer's whole output.
  DeviceArray part{true}, recv{true}, out{true};
  [[nodiscard]] std::size_t bytes() const noexcept override {
    return x.bytes() + z.bytes() + dz.bytes() + y.bytes() + dx.bytes() + dy_cols.bytes() +
           out.bytes();
  }
};

class CudaDense final : public TwinnedUnit {
 public:
  CudaDense(const tessera_host_api* host, std::unique_ptr<Unit> twin, int64_t in, int64_t out,
            UnitActivation act, bool gather_output)
      : TwinnedUnit(host, std::move(twin)),
        in_(in),
        out_(out),
        act_(act_of(act)),
        row_(specs_[0].split == SplitHint::row),
        gather_output_(!row_ && gather_output) {}

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override {
    return std::make_unique<DenseContext>();
  }

  ConstView forward(UnitContext& ctx_base, std::span<const float* const> params,
                    const UnitInput& input) const override {
    check_counts(params.size(), 0);
    auto& ctx = dynamic_cast<DenseContext&>(ctx_base);
    const TpGroup tp(input.tp, host_.raw(), name_);
    const int32_t p = tp.size();
    ctx.tp_size = p;
    ctx.sequence = tp.sequence();
    ctx.input_grad_done = false;
    Lane& l = lane(host_, name_);
    ctx.params.bind(params, specs_, l, name_, p);
    if (tp.active() && row_) return forward_row(ctx, tp, input, l);
    // Whole, or a column layer: this rank's out/p columns. Under sequence
    // parallelism one after a row layer gathers the whole input rows (kept
    // for the weight gradient); the first reads the whole batch either way.
    const int64_t out = out_ / p;
    const int64_t n = tp.sequence() && !is_first()
                          ? gather_input(*this, in_, input, tp, ctx.recv, ctx.x.f32(), l)
                          : take_input(*this, in_, input, ctx.x.f32(), l);
    ctx.x.keep(static_cast<size_t>(n * in_), l, name_);
    const int64_t local = tp.local_positions("the batch size", n);
    ctx.rows = n;
    const auto count = static_cast<size_t>(n * out);
    float* z = ctx.z.ensure(count, l, name_);
    float* y = ctx.y.ensure(count, l, name_);
    product_bias_activation(l, n, out, in_, ctx.x.operand(), ctx.params[0], ctx.params[1], z, y,
                            act_, name_);
    finish_call(l, name_);
    if (!gather_output_ || !tp.active()) return {y, n, out};
    // Block k of the allgather is rank k's [n, out/p]: columns [k·out/p,
    // (k+1)·out/p) of the whole output, of which a rank keeps its examples'
    // rows under sequence parallelism.
    float* blocks = ctx.recv.ensure(static_cast<size_t>(n * out_), l, name_);
    tp.allgather(y, n * out, blocks, "the output shards");
    const int64_t rows = tp.sequence() ? local : n;
    const int64_t lo = tp.sequence() ? tp.rank() * local : 0;
    float* whole = ctx.out.ensure(static_cast<size_t>(rows * out_), l, name_);
    for (int64_t k = 0; k < p; ++k) {
      copy_columns(whole + k * out, out_, blocks + (k * n + lo) * out, out, rows, out, l, name_);
    }
    finish_call(l, name_);
    return {whole, rows, out_};
  }

  // dz = dy ⊙ act'(z) (kept) and dx = dz·wᵀ, summed over the group where
  // every rank's shard read the same input.
  ConstView backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                           ConstView grad_output) const override {
    check_counts(params.size(), 0);
    auto& ctx = dynamic_cast<DenseContext&>(ctx_base);
    require_forward(ctx.rows >= 0);
    const TpGroup tp = TpGroup::for_backward(ctx.tp(), host_.raw(), name_, ctx.tp_size, "backward");
    tp.require_sequence(ctx.sequence, "backward");
    const int64_t n = ctx.rows;
    const int32_t p = tp.size();
    const bool column = !row_ || p == 1;
    const bool sequence = ctx.sequence;
    const int64_t local = sequence ? n / p : n;  // this rank's rows of the examples
    const int64_t out = column ? out_ / p : out_;
    const int64_t in = column ? in_ : in_ / p;
    // The gradient has the forward output's shape.
    const bool gathered = column && p > 1 && gather_output_;
    const int64_t grad_cols = column && !gathered ? out : out_;
    const int64_t grad_rows = sequence && (!column || gathered) ? local : n;
    Lane& l = lane(host_, name_);
    const float* dy = output_gradient(*this, grad_output, grad_rows, grad_cols, ctx.staging_dy, l);
    float* dz = ctx.dz.ensure(static_cast<size_t>(n * out), l, name_);
    if (sequence && !column) {
      // A row layer: the activation's backward on this rank's rows, then
      // the whole pre-activation gradient from every rank's rows.
      float* mine = ctx.part.ensure(static_cast<size_t>(local * out), l, name_);
      activation_backward(ctx.z.get(), dy, mine, local * out, act_, l.stream);
      finish_call(l, name_);
      float* whole = ctx.recv.ensure(static_cast<size_t>(n * out), l, name_);
      tp.gather_rows(mine, 1, local, out, whole, "the output gradient rows");
      copy_device(dz, whole, static_cast<size_t>(n * out), l, name_);
    } else {
      if (sequence && gathered) {
        // This rank's rows of the whole output's gradient: every rank's.
        float* mine = ctx.part.ensure(static_cast<size_t>(local * out_), l, name_);
        copy_device(mine, dy, static_cast<size_t>(local * out_), l, name_);
        finish_call(l, name_);
        float* whole = ctx.recv.ensure(static_cast<size_t>(n * out_), l, name_);
        tp.gather_rows(mine, 1, local, out_, whole, "the output gradient rows");
        dy = whole;
      }
      if (grad_cols != out) {
        // A gathered output: this rank's columns of the whole gradient.
        float* mine = ctx.dy_cols.ensure(static_cast<size_t>(n * out), l, name_);
        copy_columns(mine, out, dy + static_cast<int64_t>(tp.rank()) * out, out_, n, out, l, name_);
        dy = mine;
      }
      activation_backward(ctx.z.get(), dy, dz, n * out, act_, l.stream);
    }
    release_all({&ctx.z, &ctx.staging_dy, &ctx.dy_cols}, l, name_);
    ctx.input_grad_done = true;
    if (is_first()) {
      finish_call(l, name_);
      return {};
    }
    ctx.params.bind(params, specs_, l, name_, p);
    // A column layer's input feeds every rank's shard: its gradient is the
    // sum (under sequence parallelism the input's rows were gathered).
    return product_input_gradient(tp, column, l, dz, ctx.params[0], n, in, out, ctx.part, ctx.dx,
                                  "the input gradient", name_);
  }

  // dW += xᵀ·dz, db += Σ_rows dz (a row layer's replicated bias under
  // sequence parallelism: this rank's rows only; the caller sums the parts).
  void backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                       std::span<float* const> grads) const override {
    check_counts(params.size(), grads.size());
    auto& ctx = dynamic_cast<DenseContext&>(ctx_base);
    take_input_half(ctx.input_grad_done);
    const TpGroup tp =
        TpGroup::for_backward(ctx.tp(), host_.raw(), name_, ctx.tp_size, "backward_weight");
    tp.require_sequence(ctx.sequence, "backward_weight");
    const int64_t n = ctx.rows;
    const int32_t p = tp.size();
    const bool column = !row_ || p == 1;
    const int64_t in = column ? in_ : in_ / p;
    const int64_t out = column ? out_ / p : out_;
    Lane& l = lane(host_, name_);
    ctx.grads.bind(grads, specs_, l, name_, p);
    gemm(l, true, false, in, out, n, 1.0f, ctx.x.operand(), in, ctx.dz.get(), out, 1.0f,
         ctx.grads[0], out, name_);
    if (ctx.sequence && !column) {
      const int64_t local = n / p;
      column_sum_add(ctx.dz.get() + tp.rank() * local * out, local, out, ctx.grads[1], l.stream);
    } else {
      column_sum_add(ctx.dz.get(), n, out, ctx.grads[1], l.stream);
    }
    ctx.grads.finish(l, name_);
    finish_call(l, name_);
  }

 private:
  // A row layer: this rank's in/p rows of w and its input columns; the
  // partial products summed over the group before the (whole) bias, or
  // under sequence parallelism reduce-scattered to this rank's examples,
  // the bias and activation on those rows only.
  ConstView forward_row(DenseContext& ctx, const TpGroup& tp, const UnitInput& input,
                        Lane& l) const {
    const int64_t in = in_ / tp.size();
    const int64_t n = take_input(*this, in, input, ctx.x.f32(), l);
    ctx.x.keep(static_cast<size_t>(n * in), l, name_);
    ctx.rows = n;
    float* partial = ctx.part.ensure(static_cast<size_t>(n * out_), l, name_);
    gemm(l, false, false, n, out_, in, 1.0f, ctx.x.operand(), in, ctx.params[0], out_, 0.0f,
         partial, out_, name_);
    finish_call(l, name_);
    int64_t rows = n;
    const float* sum = partial;
    if (tp.sequence()) {
      rows = tp.local_positions("the batch size", n);
      float* mine = ctx.recv.ensure(static_cast<size_t>(rows * out_), l, name_);
      tp.scatter_rows_sum(partial, 1, rows, out_, mine, "the partial products");
      sum = mine;
    } else {
      tp.allreduce_sum(partial, n * out_, "the partial products");
    }
    const auto count = static_cast<size_t>(rows * out_);
    float* z = ctx.z.ensure(count, l, name_);
    float* y = ctx.y.ensure(count, l, name_);
    copy_device(z, sum, count, l, name_);
    bias_activation(z, ctx.params[1], y, rows, out_, act_, l.stream);
    finish_call(l, name_);
    return {y, rows, out_};
  }
  int64_t in_;
  int64_t out_;
  Act act_;
  bool row_;
  bool gather_output_;
};
struct HeadContext final : UnitContext {
  int64_t rows = -1;
  bool input_grad_done = false;
  int32_t tp_size = 1;        // the forward's group size (backward's must match)
  bool parallel = false;      // classes-parallel in that group
  bool sequence = false;      // the forward split the examples (TESSERA_TP_SEQUENCE)
  int64_t first_class = 0;    // this rank's first class
  int64_t local_classes = 0;  // and how many it holds
  float scale = 1.0f;
  float loss = 0.0f;
  Operands params;
  GradTargets grads;
  KeptOperand x;  // the product's input alone (16-bit under bf16 or f16)
  // The logits are given back once the cross-entropy has its probabilities.
  DeviceArray logits, dlogits, targets;
  CrossEntropyArrays xent;
  DeviceArray dx{true};
  // Exchanged with the group: partial input gradients, what comes back.
  DeviceArray part{true}, recv{true};
  [[nodiscard]] std::size_t bytes() const noexcept override {
    return x.bytes() + logits.bytes() + xent.probs.bytes() + dlogits.bytes() + targets.bytes() +
           xent.row_loss.bytes() + dx.bytes() + xent.mx.bytes() + xent.sums.bytes();
  }
};

class CudaClassifier final : public TwinnedUnit {
 public:
  CudaClassifier(const tessera_host_api* host, std::unique_ptr<Unit> twin, int64_t in,
                 int64_t classes)
      : TwinnedUnit(host, std::move(twin)), in_(in), classes_(classes) {}

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override {
    return std::make_unique<HeadContext>();
  }

  // Classes-parallel when the group divides the classes: the logits of
  // this rank's classes and a cross-entropy over the group (their maxima
  // and sums allreduced). Otherwise the head is whole on every rank and
  // needs no communication, but under sequence parallelism it computes its
  // examples' rows and the loss is summed over the group.
  ConstView forward(UnitContext& ctx_base, std::span<const float* const> params,
                    const UnitInput& input) const override {
    check_counts(params.size(), 0);
    auto& ctx = dynamic_cast<HeadContext&>(ctx_base);
    const TpGroup group(input.tp, host_.raw(), name_);
    const bool parallel = group.active() && classes_ % group.size() == 0;
    const bool sequence = group.sequence();
    Lane& l = lane(host_, name_);
    // Rows this unit computes, from example `row0` of the batch on: under
    // sequence parallelism a classes-parallel head gathers every rank's
    // rows (a first one reads them all), a replicated one keeps this rank's.
    int64_t n = 0;
    int64_t row0 = 0;
    if (sequence && parallel && !is_first()) {
      n = gather_input(*this, in_, input, group, ctx.recv, ctx.x.f32(), l);
    } else {
      n = take_input(*this, in_, input, ctx.x.f32(), l);
      if (sequence && !parallel) {
        if (is_first()) {
          // This rank's examples of the whole batch.
          const int64_t all = n;
          n = group.local_positions("the batch size", all);
          row0 = group.rank() * n;
          if (row0 > 0) {  // rows [row0, row0 + n) lie past the first n: no overlap
            float* x = ctx.x.f32().get();
            copy_device(x, x + row0 * in_, static_cast<size_t>(n * in_), l, name_);
          }
        } else {
          row0 = group.rank() * n;
        }
      }
    }
    const int64_t batch_rows = sequence && !parallel ? n * group.size() : n;
    TESSERA_CHECK(input.batch != nullptr && !input.batch->is_sequence() &&
                      static_cast<int64_t>(input.batch->targets.size()) == batch_rows,
                  TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                  "': needs a classification batch with one target per row (", batch_rows,
                  " rows)");
    (void)group.local_positions("the batch size", batch_rows);
    const int32_t* targets = upload_ids(
        std::span(input.batch->targets).subspan(static_cast<size_t>(row0), static_cast<size_t>(n)),
        classes_, "target", "of row", ctx.targets, l, name_);
    ctx.rows = n;
    ctx.input_grad_done = false;
    ctx.scale = input.loss_scale;
    ctx.tp_size = group.size();
    ctx.parallel = parallel;
    ctx.sequence = sequence;
    const int32_t parts = parallel ? group.size() : 1;
    const int64_t c = classes_ / parts;
    ctx.local_classes = c;
    ctx.first_class = parallel ? group.rank() * c : 0;
    ctx.params.bind(params, specs_, l, name_, parts);
    ctx.x.keep(static_cast<size_t>(n * in_), l, name_);
    float* logits = ctx.logits.ensure(static_cast<size_t>(n * c), l, name_);
    gemm(l, false, false, n, c, in_, 1.0f, ctx.x.operand(), in_, ctx.params[0], c, 0.0f, logits, c,
         name_,
         {.kind = ctx.params[1] != nullptr ? Fused::bias : Fused::none, .bias = ctx.params[1]});
    if (parallel) {
      parallel_cross_entropy(l, group, logits, targets, n, c, ctx.first_class, input.loss_scale,
                             ctx.xent, &ctx.loss, name_);
    } else {
      cross_entropy(l, logits, targets, n, c, input.loss_scale, ctx.xent, &ctx.loss, name_);
    }
    ctx.logits.release(l, name_);
    finish_call(l, name_);
    if (sequence && !parallel) {
      // Every rank returns the loss of the whole batch.
      float* loss = ctx.xent.sums.ensure(1, l, name_);
      check(cudaMemcpy(loss, &ctx.loss, sizeof(float), cudaMemcpyDefault), name_, "cudaMemcpy");
      group.allreduce_sum(loss, 1, "the loss");
      check(cudaMemcpy(&ctx.loss, loss, sizeof(float), cudaMemcpyDefault), name_, "cudaMemcpy");
    }
    return {&ctx.loss, 1, 1};
  }

  // dlogits (kept) on this rank's classes, and dx = dlogits·wᵀ, summed
  // over a classes-parallel group.
  ConstView backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                           ConstView grad_output) const override {
    check_counts(params.size(), 0);
    auto& ctx = dynamic_cast<HeadContext&>(ctx_base);
    require_forward(ctx.rows >= 0);
    const TpGroup group =
        TpGroup::for_backward(ctx.tp(), host_.raw(), name_, ctx.tp_size, "backward");
    group.require_sequence(ctx.sequence, "backward");
    Lane& l = lane(host_, name_);
    const float g = loss_gradient(grad_output, name_);
    const int64_t n = ctx.rows;
    const int64_t c = ctx.local_classes;
    float* dlogits = ctx.dlogits.ensure(static_cast<size_t>(n * c), l, name_);
    xent_backward(ctx.xent.probs.get(), ctx.targets.get<int32_t>(), n, c, ctx.first_class,
                  ctx.scale * g, dlogits, l.stream);
    release_all({&ctx.xent.probs, &ctx.xent.row_loss, &ctx.targets}, l, name_);
    ctx.input_grad_done = true;
    if (is_first()) {
      finish_call(l, name_);
      return {};
    }
    const int32_t parts = ctx.parallel ? group.size() : 1;
    ctx.params.bind(params, specs_, l, name_, parts);
    return product_input_gradient(group, ctx.parallel, l, dlogits, ctx.params[0], n, in_, c,
                                  ctx.part, ctx.dx, "the head's input gradient", name_);
  }

  // dW += xᵀ·dlogits, db += Σ_rows dlogits (a replicated head under
  // sequence parallelism: this rank's rows' part; the caller sums them).
  void backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                       std::span<float* const> grads) const override {
    check_counts(params.size(), grads.size());
    auto& ctx = dynamic_cast<HeadContext&>(ctx_base);
    take_input_half(ctx.input_grad_done);
    const TpGroup group =
        TpGroup::for_backward(ctx.tp(), host_.raw(), name_, ctx.tp_size, "backward_weight");
    group.require_sequence(ctx.sequence, "backward_weight");
    const int64_t n = ctx.rows;
    const int64_t c = ctx.local_classes;
    Lane& l = lane(host_, name_);
    ctx.grads.bind(grads, specs_, l, name_, ctx.parallel ? group.size() : 1);
    gemm(l, true, false, in_, c, n, 1.0f, ctx.x.operand(), in_, ctx.dlogits.get(), c, 1.0f,
         ctx.grads[0], c, name_);
    column_sum_add(ctx.dlogits.get(), n, c, ctx.grads[1], l.stream);
    ctx.grads.finish(l, name_);
    finish_call(l, name_);
  }

 private:
  int64_t in_;
  int64_t classes_;
};

std::unique_ptr<Unit> make_dense(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                 int64_t in, int64_t out, UnitActivation act, bool gather_output) {
  return std::make_unique<CudaDense>(host, std::move(twin), in, out, act, gather_output);
}

std::unique_ptr<Unit> make_classifier(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                      int64_t in, int64_t classes) {
  return std::make_unique<CudaClassifier>(host, std::move(twin), in, classes);
}

constexpr UnitFactory kFactory{kUnitFactoryVersion,   &make_dense,       &make_classifier,
                               &make_gpt_embedding,   &make_gpt_block,   &make_gpt_head,
                               &make_llama_embedding, &make_llama_block, &make_llama_head};

}  // namespace
}  // namespace tessera::model::cuda

extern "C" __attribute__((visibility("default"))) const tessera::model::cuda::UnitFactory*
TESSERA_CUDA_UNITS_ENTRY() {
  return &tessera::model::cuda::kFactory;
}

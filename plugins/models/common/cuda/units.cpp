// The CUDA units of the mlp (see tessera/models/cuda_units.hpp) and the
// module's entry: GEMMs through cuBLAS in plain f32 unless the run asks
// for TF32 or 16-bit products (so by default a CUDA run matches the CPU
// one to float rounding), bias, activations and the cross-entropy in
// device_kernels.cu.
// Each call runs on its thread's stream of the rank's device and returns
// once the device is done, so what it hands back may be read by the host.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "device_support.hpp"

namespace tessera::model::cuda {
namespace {
struct DenseContext final : UnitContext {
  int64_t rows = -1;
  bool input_grad_done = false;
  Operands params;
  GradTargets grads;
  DeviceArray x, z, dz, staging_dy;
  DeviceArray y{true}, dx{true};
  [[nodiscard]] std::size_t bytes() const noexcept override {
    return x.bytes() + z.bytes() + dz.bytes() + y.bytes() + dx.bytes();
  }
};

class CudaDense final : public TwinnedUnit {
 public:
  CudaDense(const tessera_host_api* host, std::unique_ptr<Unit> twin, int64_t in, int64_t out,
            UnitActivation act)
      : TwinnedUnit(host, std::move(twin)), in_(in), out_(out), act_(act_of(act)) {}

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override {
    return std::make_unique<DenseContext>();
  }

  ConstView forward(UnitContext& ctx_base, std::span<const float* const> params,
                    const UnitInput& input) const override {
    check_counts(params.size(), 0);
    check_untensored(*this, input);
    auto& ctx = dynamic_cast<DenseContext&>(ctx_base);
    Lane& l = lane(host_, name_);
    const int64_t n = take_input(*this, in_, input, ctx.x, l);
    ctx.rows = n;
    const auto count = static_cast<size_t>(n * out_);
    ctx.params.bind(params, specs_, l, name_);
    float* z = ctx.z.ensure(count, l, name_);
    float* y = ctx.y.ensure(count, l, name_);
    gemm(l, false, false, n, out_, in_, 1.0f, ctx.x.get(), in_, ctx.params[0], out_, 0.0f, z, out_,
         name_);
    bias_activation(z, ctx.params[1], y, n, out_, act_, l.stream);
    finish_call(l, name_);
    return {y, n, out_};
  }

  // dz = dy ⊙ act'(z) (kept) and dx = dz·wᵀ.
  ConstView backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                           ConstView grad_output) const override {
    check_counts(params.size(), 0);
    auto& ctx = dynamic_cast<DenseContext&>(ctx_base);
    require_forward(ctx.rows >= 0);
    const int64_t n = ctx.rows;
    Lane& l = lane(host_, name_);
    const auto count = static_cast<size_t>(n * out_);
    const float* dy = output_gradient(*this, grad_output, n, out_, ctx.staging_dy, l);
    float* dz = ctx.dz.ensure(count, l, name_);
    activation_backward(ctx.z.get(), dy, dz, static_cast<int64_t>(count), act_, l.stream);
    ConstView result;
    if (!is_first()) {
      ctx.params.bind(params, specs_, l, name_);
      float* dx = ctx.dx.ensure(static_cast<size_t>(n * in_), l, name_);
      gemm(l, false, true, n, in_, out_, 1.0f, dz, out_, ctx.params[0], out_, 0.0f, dx, in_, name_);
      result = {dx, n, in_};
    }
    ctx.input_grad_done = true;
    finish_call(l, name_);
    return result;
  }

  // dW += xᵀ·dz, db += Σ_rows dz.
  void backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                       std::span<float* const> grads) const override {
    check_counts(params.size(), grads.size());
    auto& ctx = dynamic_cast<DenseContext&>(ctx_base);
    take_input_half(ctx.input_grad_done);
    const int64_t n = ctx.rows;
    Lane& l = lane(host_, name_);
    ctx.grads.bind(grads, specs_, l, name_);
    gemm(l, true, false, in_, out_, n, 1.0f, ctx.x.get(), in_, ctx.dz.get(), out_, 1.0f,
         ctx.grads[0], out_, name_);
    column_sum_add(ctx.dz.get(), n, out_, ctx.grads[1], l.stream);
    ctx.grads.finish(l, name_);
    finish_call(l, name_);
  }

 private:
  int64_t in_;
  int64_t out_;
  Act act_;
};

struct HeadContext final : UnitContext {
  int64_t rows = -1;
  bool input_grad_done = false;
  float scale = 1.0f;
  float loss = 0.0f;
  Operands params;
  GradTargets grads;
  DeviceArray x, logits, dlogits, targets;
  CrossEntropyArrays xent;
  DeviceArray dx{true};
  [[nodiscard]] std::size_t bytes() const noexcept override {
    return x.bytes() + logits.bytes() + xent.probs.bytes() + dlogits.bytes() + targets.bytes() +
           xent.row_loss.bytes() + dx.bytes();
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

  ConstView forward(UnitContext& ctx_base, std::span<const float* const> params,
                    const UnitInput& input) const override {
    check_counts(params.size(), 0);
    check_untensored(*this, input);
    auto& ctx = dynamic_cast<HeadContext&>(ctx_base);
    Lane& l = lane(host_, name_);
    const int64_t n = take_input(*this, in_, input, ctx.x, l);
    TESSERA_CHECK(input.batch != nullptr && !input.batch->is_sequence() &&
                      static_cast<int64_t>(input.batch->targets.size()) == n,
                  TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                  "': needs a classification batch with one target per row (", n, " rows)");
    const int32_t* targets =
        upload_ids(input.batch->targets, classes_, "target", "of row", ctx.targets, l, name_);
    ctx.rows = n;
    ctx.scale = input.loss_scale;
    const auto count = static_cast<size_t>(n * classes_);
    ctx.params.bind(params, specs_, l, name_);
    float* logits = ctx.logits.ensure(count, l, name_);
    gemm(l, false, false, n, classes_, in_, 1.0f, ctx.x.get(), in_, ctx.params[0], classes_, 0.0f,
         logits, classes_, name_);
    bias_activation(logits, ctx.params[1], nullptr, n, classes_, Act::none, l.stream);
    cross_entropy(l, logits, targets, n, classes_, input.loss_scale, ctx.xent, &ctx.loss, name_);
    finish_call(l, name_);
    return {&ctx.loss, 1, 1};
  }

  // dlogits (kept) and dx = dlogits·wᵀ.
  ConstView backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                           ConstView grad_output) const override {
    check_counts(params.size(), 0);
    auto& ctx = dynamic_cast<HeadContext&>(ctx_base);
    require_forward(ctx.rows >= 0);
    Lane& l = lane(host_, name_);
    const float g = loss_gradient(grad_output, name_);
    const int64_t n = ctx.rows;
    const auto count = static_cast<size_t>(n * classes_);
    float* dlogits = ctx.dlogits.ensure(count, l, name_);
    xent_backward(ctx.xent.probs.get(), ctx.targets.get<int32_t>(), n, classes_, ctx.scale * g,
                  dlogits, l.stream);
    ConstView result;
    if (!is_first()) {
      ctx.params.bind(params, specs_, l, name_);
      float* dx = ctx.dx.ensure(static_cast<size_t>(n * in_), l, name_);
      gemm(l, false, true, n, in_, classes_, 1.0f, dlogits, classes_, ctx.params[0], classes_, 0.0f,
           dx, in_, name_);
      result = {dx, n, in_};
    }
    ctx.input_grad_done = true;
    finish_call(l, name_);
    return result;
  }

  // dW += xᵀ·dlogits, db += Σ_rows dlogits.
  void backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                       std::span<float* const> grads) const override {
    check_counts(params.size(), grads.size());
    auto& ctx = dynamic_cast<HeadContext&>(ctx_base);
    take_input_half(ctx.input_grad_done);
    const int64_t n = ctx.rows;
    Lane& l = lane(host_, name_);
    ctx.grads.bind(grads, specs_, l, name_);
    gemm(l, true, false, in_, classes_, n, 1.0f, ctx.x.get(), in_, ctx.dlogits.get(), classes_,
         1.0f, ctx.grads[0], classes_, name_);
    column_sum_add(ctx.dlogits.get(), n, classes_, ctx.grads[1], l.stream);
    ctx.grads.finish(l, name_);
    finish_call(l, name_);
  }

 private:
  int64_t in_;
  int64_t classes_;
};

std::unique_ptr<Unit> make_dense(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                 int64_t in, int64_t out, UnitActivation act) {
  return std::make_unique<CudaDense>(host, std::move(twin), in, out, act);
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

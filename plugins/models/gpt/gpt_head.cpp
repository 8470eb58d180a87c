// The gpt's final LayerNorm + head + cross-entropy unit (see gpt.hpp).
#include <utility>

#include "gpt.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/tensor_parallel.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {
namespace {

struct GptHeadContext final : UnitContext {
  int64_t rows = -1;      // whole rows (every target)
  int64_t batch = 0;      // examples
  int64_t local_seq = 0;  // positions per example of x's rows (seq/tp in sequence mode)
  int32_t tp_size = 1;    // tensor-parallel group of the forward
  int64_t vocab_lo = 0;   // this rank's rows of w: [vocab_lo, vocab_lo + vocab_rows)
  int64_t vocab_rows = 0;
  bool input_grad_done = false;  // backward_input ran; backward_weight may follow
  float scale = 1.0f;
  float loss = 0.0f;
  std::vector<int32_t> targets;
  // x and the statistics: this rank's rows under sequence parallelism; h
  // (ln_f's output) whole.
  std::vector<float> x, mean, rstd, h, probs;
  // Kept by backward_input for the weight half: the logits' gradient and
  // the final LayerNorm's gain and bias gradients, summed over the rows.
  std::vector<float> dlogits, dlnf_g, dlnf_b;
  std::vector<float> dh, dx;
  [[nodiscard]] std::size_t bytes() const noexcept override {
    std::size_t total = targets.capacity() * sizeof(int32_t);
    for (const auto* b : {&x, &mean, &rstd, &h, &probs, &dlogits, &dlnf_g, &dlnf_b, &dh, &dx}) {
      total += b->capacity() * sizeof(float);
    }
    return total;
  }
};

}  // namespace

GptHead::GptHead(std::string name, int64_t vocab, int64_t d_model, std::string tied_to,
                 int64_t seq_len)
    : ConventionUnit(std::move(name), false, true),
      vocab_(vocab),
      d_(d_model),
      seq_len_(seq_len > 0 ? seq_len : 1) {
  specs_.push_back({"lnf_g", {d_model}, SplitHint::none, {}});
  specs_.push_back({"lnf_b", {d_model}, SplitHint::none, {}});
  const bool tied = !tied_to.empty();
  specs_.push_back({tied ? "wte" : "w", {vocab, d_model}, SplitHint::row, std::move(tied_to)});
}

UnitCost GptHead::cost() const {
  // Per token: LayerNorm, the [d, vocab] GEMM and the softmax.
  const auto d = static_cast<double>(d_);
  const auto v = static_cast<double>(vocab_);
  const auto t = static_cast<double>(seq_len_);
  UnitCost c;
  c.forward_flops = t * (8.0 * d + 2.0 * d * v + 5.0 * v);
  c.backward_flops = t * (8.0 * d + 4.0 * d * v + 2.0 * v);
  // Per example after forward and backward: the probabilities and their
  // gradient (split by vocabulary); the input, its gradient and the
  // LayerNorm statistics (split in sequence mode); ln_f's output, its
  // gradient and the targets (whole).
  set_activations(c, 2.0 * t * v, t * (2.0 * d + 2.0), t * (2.0 * d + 1.0), 0.0);
  return c;
}

std::unique_ptr<UnitContext> GptHead::make_context() const {
  return std::make_unique<GptHeadContext>();
}

void GptHead::check_tensor_parallel(int32_t size, uint32_t flags) const {
  const TpGroup tp = TpGroup::for_check(size, flags, name_);
  tp.require_divisible("vocab", vocab_);  // the embedding checks seq_len
}

ConstView GptHead::forward(UnitContext& ctx_base, std::span<const float* const> params,
                           const UnitInput& input) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& c = dynamic_cast<GptHeadContext&>(ctx_base);
  TESSERA_CHECK(input.batch != nullptr && input.batch->is_sequence(), TESSERA_ERR_INVALID_ARGUMENT,
                "unit '", name_, "': needs a sequence batch");
  const int64_t bsz = input.batch->size;
  const int64_t n = bsz * input.batch->seq_len;
  // Vocabulary-parallel under a group: this rank's vocab/tp rows of w give
  // its slice of the logits, and the cross-entropy combines the slices'
  // maxima, sums and target logits over the group (parallel_xent_forward).
  // The final LayerNorm is replicated; under sequence parallelism it runs
  // on this rank's rows, and its output is gathered whole for the logits.
  const TpGroup tp(input.tp, ctx_base.host(), name_);
  tp.require_divisible("vocab", vocab_);
  const int64_t local_seq = tp.local_positions("the batch's seq_len", input.batch->seq_len);
  const int64_t nl = bsz * local_seq;
  TESSERA_CHECK(!input.x.empty() && input.x.cols == d_ && input.x.rows == nl &&
                    static_cast<int64_t>(input.batch->targets.size()) == n,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': input is ", input.x.rows, "x",
                input.x.cols, ", expected ", nl, "x", d_, " (one row per target",
                tp.sequence() ? " of this rank's positions)" : ")");
  c.rows = n;
  c.batch = bsz;
  c.local_seq = local_seq;
  c.tp_size = tp.size();
  c.vocab_rows = vocab_ / tp.size();
  c.vocab_lo = c.vocab_rows * tp.rank();
  c.input_grad_done = false;
  c.scale = input.loss_scale;
  c.targets.assign(input.batch->targets.begin(), input.batch->targets.end());
  c.x.assign(input.x.data, input.x.data + nl * d_);
  c.mean.resize(static_cast<std::size_t>(nl));
  c.rstd.resize(static_cast<std::size_t>(nl));
  c.h.resize(static_cast<std::size_t>(n * d_));
  norm_rows_to_whole(tp, bsz, local_seq, d_, c.h.data(), "the final LayerNorm's output",
                     [&](float* h) {
                       kernels::layernorm_forward(c.x.data(), params[0], params[1], nl, d_, h,
                                                  c.mean.data(), c.rstd.data());
                     });
  const int64_t cols = c.vocab_rows;
  c.probs.resize(static_cast<std::size_t>(n * cols));
  kernels::gemm_overwrite(false, true, n, cols, d_, 1.0f, c.h.data(), d_, params[2], d_,
                          c.probs.data(), cols);
  const double loss = parallel_xent_forward(tp, c.probs.data(), c.targets.data(), n, cols,
                                            c.vocab_lo, vocab_, c.probs.data(), name_);
  c.loss = static_cast<float>(loss * input.loss_scale);
  return {&c.loss, 1, 1};
}

ConstView GptHead::backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                                  ConstView grad_output) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& c = dynamic_cast<GptHeadContext&>(ctx_base);
  TESSERA_CHECK(c.rows >= 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward without a forward on this context");
  const TpGroup tp = TpGroup::for_backward(c.tp(), c.host(), name_, c.tp_size, "backward");
  tp.require_sequence(c.rows != c.batch * c.local_seq, "backward");
  const int64_t n = c.rows;
  const int64_t cols = c.vocab_rows;
  const float g = grad_output.empty() ? 1.0f : grad_output.data[0];
  c.dlogits.resize(static_cast<std::size_t>(n * cols));
  parallel_xent_backward(c.probs.data(), c.targets.data(), n, cols, c.vocab_lo, c.scale * g,
                         c.dlogits.data());
  // logits = h wᵀ: dh = dlogits w (the weight half adds dlogitsᵀ h into dw);
  // under a group each rank's vocabulary slice gives a part of dh.
  c.dh.resize(static_cast<std::size_t>(n * d_));
  kernels::gemm_overwrite(false, false, n, d_, cols, 1.0f, c.dlogits.data(), cols, params[2], d_,
                          c.dh.data(), d_);
  const int64_t nl = c.batch * c.local_seq;
  std::vector<float> local;  // sequence parallelism: this rank's rows of the sum
  float* dh = c.dh.data();
  if (tp.sequence()) {
    local.resize(static_cast<std::size_t>(nl * d_));
    dh = local.data();
  }
  tp.partial_to_rows(c.dh.data(), c.batch, c.local_seq, d_, dh, "the head's input gradient");
  c.dx.assign(static_cast<std::size_t>(nl * d_), 0.0f);
  c.dlnf_g.assign(static_cast<std::size_t>(d_), 0.0f);
  c.dlnf_b.assign(static_cast<std::size_t>(d_), 0.0f);
  kernels::layernorm_backward(c.x.data(), params[0], c.mean.data(), c.rstd.data(), dh, nl, d_,
                              c.dx.data(), c.dlnf_g.data(), c.dlnf_b.data());
  c.input_grad_done = true;
  return {c.dx.data(), nl, d_};
}

void GptHead::backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                              std::span<float* const> grads) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  auto& c = dynamic_cast<GptHeadContext&>(ctx_base);
  TESSERA_CHECK(c.input_grad_done, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward_weight without backward_input on this context");
  TpGroup::for_backward(c.tp(), c.host(), name_, c.tp_size, "backward_weight")
      .require_sequence(c.rows != c.batch * c.local_seq, "backward_weight");
  // dw += dlogitsᵀ h (this rank's rows); when tied, grads[2] is the
  // embedding table's gradient, split by vocabulary alike. The LayerNorm's
  // gradients are whole and the same on every rank of a group in tensor
  // mode, this rank's rows' part under sequence parallelism.
  kernels::gemm(true, false, c.vocab_rows, d_, c.rows, 1.0f, c.dlogits.data(), c.vocab_rows,
                c.h.data(), d_, 1.0f, grads[2], d_);
  kernels::add_into(grads[0], c.dlnf_g.data(), d_);
  kernels::add_into(grads[1], c.dlnf_b.data(), d_);
  c.input_grad_done = false;
}

ConstView GptHead::backward(UnitContext& ctx_base, std::span<const float* const> params,
                            std::span<float* const> grads, ConstView grad_output) const {
  // The two halves in order; the weight half does not touch dx.
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  const ConstView grad_input = backward_input(ctx_base, params, grad_output);
  backward_weight(ctx_base, params, grads);
  return grad_input;
}

}  // namespace tessera::model

// The llama's final RMSNorm + output projection + cross-entropy unit (see
// llama.hpp).
#include <utility>
#include <vector>

#include "llama.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/tensor_parallel.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {
namespace {

struct LlamaHeadContext final : UnitContext {
  int64_t rows = -1;      // tokens of the batch (all of them, also with sequence parallelism)
  int64_t examples = 0;   // sequences of the batch
  int64_t seq_local = 0;  // this rank's positions of each with sequence parallelism
  bool sequence = false;  // the forward ran with sequence parallelism
  int32_t tp_size = 1;    // tensor-parallel group of the forward
  int64_t vocab_lo = 0;   // this rank's columns of w: [vocab_lo, vocab_lo + vocab_cols)
  int64_t vocab_cols = 0;
  bool input_grad_done = false;  // backward_input ran; backward_weight may follow
  float scale = 1.0f;
  float loss = 0.0f;
  std::vector<int32_t> targets;
  // x and rstd: this rank's rows with sequence parallelism; h and probs
  // all rows.
  std::vector<float> x, rstd, h, probs;
  // Kept by backward_input for the weight half: the logits' gradient and
  // the final RMSNorm's gain gradient, summed over the rows.
  std::vector<float> dlogits, dnorm_g;
  std::vector<float> dh, dx;
  [[nodiscard]] std::size_t bytes() const noexcept override {
    std::size_t total = targets.capacity() * sizeof(int32_t);
    for (const auto* b : {&x, &rstd, &h, &probs, &dlogits, &dnorm_g, &dh, &dx}) {
      total += b->capacity() * sizeof(float);
    }
    return total;
  }
};

}  // namespace

LlamaHead::LlamaHead(std::string name, const LlamaConfig& config)
    : ConventionUnit(std::move(name), false, true),
      vocab_(config.vocab),
      d_(config.d_model),
      seq_len_(config.seq_len),
      eps_(static_cast<float>(config.norm_eps)) {
  TESSERA_CHECK(eps_ > 0.0f, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': norm_eps must be positive");
  specs_.push_back({"norm_g", {d_}, SplitHint::none, {}});
  specs_.push_back({"w", {d_, vocab_}, SplitHint::column, {}});
}

UnitCost LlamaHead::cost() const {
  // Per token: RMSNorm, the [d, vocab] GEMM and the softmax.
  const auto d = static_cast<double>(d_);
  const auto v = static_cast<double>(vocab_);
  const auto t = static_cast<double>(seq_len_);
  UnitCost c;
  c.forward_flops = t * (4.0 * d + 2.0 * d * v + 5.0 * v);
  c.backward_flops = t * (6.0 * d + 4.0 * d * v + 2.0 * v);
  // Per example after forward and backward: the probabilities and their
  // gradient (split by vocabulary); the input, the norm's statistics and
  // the input and norm gradients (split in sequence mode); the normed
  // input and the targets (whole).
  set_activations(c, 2.0 * t * v, t * (3.0 * d + 1.0), t * (d + 1.0), 0.0);
  return c;
}

std::unique_ptr<UnitContext> LlamaHead::make_context() const {
  return std::make_unique<LlamaHeadContext>();
}

void LlamaHead::check_tensor_parallel(int32_t size, uint32_t flags) const {
  TpGroup::for_check(size, flags, name_).require_divisible("vocab", vocab_);
}

ConstView LlamaHead::forward(UnitContext& ctx_base, std::span<const float* const> params,
                             const UnitInput& input) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& c = dynamic_cast<LlamaHeadContext&>(ctx_base);
  const int64_t nl = input.x.rows;  // this rank's rows
  TESSERA_CHECK(!input.x.empty() && input.x.cols == d_, TESSERA_ERR_INVALID_ARGUMENT, "unit '",
                name_, "': input has ", input.x.cols, " columns, expected ", d_);
  // Vocabulary-parallel under a group: this rank's vocab/tp columns of w
  // give its slice of the logits, and the cross-entropy combines the
  // slices' maxima, sums and target logits over the group
  // (parallel_xent_forward). The final RMSNorm is replicated. With
  // sequence parallelism the input is this rank's seq/tp positions of each
  // sequence: the norm runs on them and its output is gathered to all rows
  // before the product; the loss is over all rows, on every rank.
  const TpGroup tp(input.tp, ctx_base.host(), name_);
  const bool sequences = input.batch != nullptr && input.batch->is_sequence();
  const int64_t seq_l = sequences ? tp.local_positions("key 'seq_len'", input.batch->seq_len) : 0;
  const int64_t n = tp.sequence() ? nl * tp.size() : nl;  // all rows
  TESSERA_CHECK(sequences && static_cast<int64_t>(input.batch->targets.size()) == n,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': needs a sequence batch with one target per input row (", n, " rows)");
  tp.require_divisible("vocab", vocab_);
  c.rows = n;
  c.examples = input.batch->size;
  c.seq_local = seq_l;
  c.sequence = tp.sequence();
  c.tp_size = tp.size();
  c.vocab_cols = vocab_ / tp.size();
  c.vocab_lo = c.vocab_cols * tp.rank();
  c.input_grad_done = false;
  c.scale = input.loss_scale;
  c.targets.assign(input.batch->targets.begin(), input.batch->targets.end());
  c.x.assign(input.x.data, input.x.data + nl * d_);
  c.rstd.resize(static_cast<std::size_t>(nl));
  c.h.resize(static_cast<std::size_t>(n * d_));
  norm_rows_to_whole(
      tp, c.examples, seq_l, d_, c.h.data(), "the head's normed input", [&](float* h) {
        kernels::rmsnorm_forward(c.x.data(), params[0], nl, d_, eps_, h, c.rstd.data());
      });
  const int64_t cols = c.vocab_cols;
  c.probs.resize(static_cast<std::size_t>(n * cols));
  kernels::linear_forward(c.h.data(), params[1], nullptr, n, d_, cols, c.probs.data());
  const double loss = parallel_xent_forward(tp, c.probs.data(), c.targets.data(), n, cols,
                                            c.vocab_lo, vocab_, c.probs.data(), name_);
  c.loss = static_cast<float>(loss * input.loss_scale);
  return {&c.loss, 1, 1};
}

ConstView LlamaHead::backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                                    ConstView grad_output) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& c = dynamic_cast<LlamaHeadContext&>(ctx_base);
  TESSERA_CHECK(c.rows >= 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward without a forward on this context");
  const TpGroup tp = TpGroup::for_backward(c.tp(), c.host(), name_, c.tp_size, "backward");
  tp.require_sequence(c.sequence, "backward_input");
  const int64_t n = c.rows;
  const int64_t nl = c.examples * c.seq_local;  // this rank's rows (n without sequence parallelism)
  const int64_t cols = c.vocab_cols;
  const float g = grad_output.empty() ? 1.0f : grad_output.data[0];
  c.dlogits.resize(static_cast<std::size_t>(n * cols));
  parallel_xent_backward(c.probs.data(), c.targets.data(), n, cols, c.vocab_lo, c.scale * g,
                         c.dlogits.data());
  // logits = h w: dh = dlogits wᵀ (the weight half adds hᵀ dlogits into dw);
  // under a group each rank's vocabulary slice gives a part of dh, summed
  // over the group (scattered to this rank's rows with sequence
  // parallelism).
  c.dh.resize(static_cast<std::size_t>(nl * d_));
  std::vector<float> partial;  // sequence parallelism: all rows, before the scatter
  float* dh = c.dh.data();
  if (c.sequence) {
    partial.resize(static_cast<std::size_t>(n * d_));
    dh = partial.data();
  }
  kernels::linear_backward_input(params[1], c.dlogits.data(), n, d_, cols, dh);
  tp.partial_to_rows(dh, c.examples, c.seq_local, d_, c.dh.data(), "the head's input gradient");
  c.dx.assign(static_cast<std::size_t>(nl * d_), 0.0f);
  c.dnorm_g.assign(static_cast<std::size_t>(d_), 0.0f);
  kernels::rmsnorm_backward(c.x.data(), params[0], c.rstd.data(), c.dh.data(), nl, d_, c.dx.data(),
                            c.dnorm_g.data());
  c.input_grad_done = true;
  return {c.dx.data(), nl, d_};
}

void LlamaHead::backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                                std::span<float* const> grads) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  auto& c = dynamic_cast<LlamaHeadContext&>(ctx_base);
  TESSERA_CHECK(c.input_grad_done, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward_weight without backward_input on this context");
  const TpGroup tp = TpGroup::for_backward(c.tp(), c.host(), name_, c.tp_size, "backward_weight");
  tp.require_sequence(c.sequence, "backward_weight");
  // This rank's columns of w (from all rows); the RMSNorm gain's gradient
  // is whole and the same on every rank of a group, or with sequence
  // parallelism this rank's rows' part, summed by the caller.
  kernels::linear_backward_weight(c.h.data(), c.dlogits.data(), c.rows, d_, c.vocab_cols, grads[1],
                                  nullptr);
  kernels::add_into(grads[0], c.dnorm_g.data(), d_);
  c.input_grad_done = false;
}

ConstView LlamaHead::backward(UnitContext& ctx_base, std::span<const float* const> params,
                              std::span<float* const> grads, ConstView grad_output) const {
  // The two halves in order; the weight half does not touch dx.
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  const ConstView grad_input = backward_input(ctx_base, params, grad_output);
  backward_weight(ctx_base, params, grads);
  return grad_input;
}

}  // namespace tessera::model

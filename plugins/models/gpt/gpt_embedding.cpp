// The gpt's token + position embedding unit (see gpt.hpp).
#include <algorithm>
#include <utility>

#include "gpt.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/tensor_parallel.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {
namespace {

struct EmbeddingContext final : UnitContext {
  int64_t batch = -1;
  int64_t seq = 0;
  int64_t local_seq = 0;  // positions per example of the output's rows (seq/tp in sequence mode)
  int64_t first_pos = 0;  // the first of them
  int32_t tp_size = 1;    // tensor-parallel group of the forward
  int64_t vocab_lo = 0;   // this rank's rows of wte: [vocab_lo, vocab_lo + vocab_rows)
  int64_t vocab_rows = 0;
  bool input_grad_done = false;  // backward_input ran; backward_weight may follow
  std::vector<int32_t> tokens;
  std::vector<float> y;
  std::vector<float> dy;  // the whole output gradient, kept by backward_input for the weight half
  [[nodiscard]] std::size_t bytes() const noexcept override {
    return tokens.capacity() * sizeof(int32_t) + (y.capacity() + dy.capacity()) * sizeof(float);
  }
};

}  // namespace

GptEmbedding::GptEmbedding(std::string name, int64_t vocab, int64_t d_model, int64_t seq_len)
    : ConventionUnit(std::move(name), true, false), vocab_(vocab), d_(d_model), seq_len_(seq_len) {
  specs_.push_back({"wte", {vocab, d_model}, SplitHint::row, {}});
  specs_.push_back({"wpe", {seq_len, d_model}, SplitHint::none, {}});
}

UnitCost GptEmbedding::cost() const {
  // The position table is added forward and its gradient summed backward.
  UnitCost c = embedding_cost(seq_len_, d_);
  c.forward_flops *= 2.0;
  c.backward_flops *= 2.0;
  return c;
}

std::unique_ptr<UnitContext> GptEmbedding::make_context() const {
  return std::make_unique<EmbeddingContext>();
}

void GptEmbedding::check_tensor_parallel(int32_t size, uint32_t flags) const {
  const TpGroup tp = TpGroup::for_check(size, flags, name_);
  tp.require_divisible("vocab", vocab_);
  (void)tp.local_positions("key 'seq_len'", seq_len_);
}

ConstView GptEmbedding::forward(UnitContext& ctx_base, std::span<const float* const> params,
                                const UnitInput& input) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& ctx = dynamic_cast<EmbeddingContext&>(ctx_base);
  const BatchView* batch = input.batch;
  TESSERA_CHECK(batch != nullptr && batch->is_sequence() && batch->seq_len <= seq_len_ &&
                    static_cast<int64_t>(batch->tokens.size()) == batch->size * batch->seq_len,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': needs a sequence batch with seq_len <= ", seq_len_);
  const int64_t n = batch->size * batch->seq_len;
  // Vocabulary-parallel under a group: this rank holds rows [lo, lo +
  // vocab/tp) of wte; a token outside them looks up zeros, and the sum over
  // the group is the whole lookup (under sequence parallelism reduce-
  // scattered to this rank's positions). wpe is replicated and added after
  // it, to the rows this rank returns.
  const TpGroup tp(input.tp, ctx_base.host(), name_);
  tp.require_divisible("vocab", vocab_);
  const int64_t local_seq = tp.local_positions("the batch's seq_len", batch->seq_len);
  const int64_t nl = batch->size * local_seq;
  ctx.batch = batch->size;
  ctx.seq = batch->seq_len;
  ctx.local_seq = local_seq;
  ctx.first_pos = tp.first_position(local_seq);
  ctx.tp_size = tp.size();
  ctx.vocab_rows = vocab_ / tp.size();
  ctx.vocab_lo = ctx.vocab_rows * tp.rank();
  ctx.input_grad_done = false;
  ctx.tokens.assign(batch->tokens.begin(), batch->tokens.end());
  ctx.y.resize(static_cast<std::size_t>(nl * d_));
  std::vector<float> partial;  // sequence parallelism: all rows' lookups, before the scatter
  float* lookup = ctx.y.data();
  if (tp.sequence()) {
    partial.resize(static_cast<std::size_t>(n * d_));
    lookup = partial.data();
  }
  const float* wte = params[0];
  const float* wpe = params[1];
  for (int64_t r = 0; r < n; ++r) {
    const int32_t tok = ctx.tokens[static_cast<std::size_t>(r)];
    TESSERA_CHECK(tok >= 0 && tok < vocab_, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                  "': token ", tok, " at position ", r, " is outside [0, ", vocab_, ")");
    const int64_t t = r % ctx.seq;
    float* yr = lookup + r * d_;
    if (!tp.active()) {
      for (int64_t j = 0; j < d_; ++j) yr[j] = wte[tok * d_ + j] + wpe[t * d_ + j];
      continue;
    }
    const int64_t local = tok - ctx.vocab_lo;
    if (local >= 0 && local < ctx.vocab_rows) {
      std::copy(wte + local * d_, wte + (local + 1) * d_, yr);
    } else {
      std::fill(yr, yr + d_, 0.0f);
    }
  }
  if (tp.active()) {
    tp.partial_to_rows(lookup, ctx.batch, local_seq, d_, ctx.y.data(), "the token embeddings");
    for (int64_t r = 0; r < nl; ++r) {
      kernels::add_into(ctx.y.data() + r * d_, wpe + (ctx.first_pos + r % local_seq) * d_, d_);
    }
  }
  return {ctx.y.data(), nl, d_};
}

ConstView GptEmbedding::backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                                       ConstView grad_output) const {
  // The first unit has no input gradient: the output gradient is kept for
  // the weight half's scatter.
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& ctx = dynamic_cast<EmbeddingContext&>(ctx_base);
  TESSERA_CHECK(ctx.batch >= 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward without a forward on this context");
  const int64_t n = ctx.batch * ctx.seq;
  const int64_t nl = ctx.batch * ctx.local_seq;
  TESSERA_CHECK(!grad_output.empty() && grad_output.rows == nl && grad_output.cols == d_,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': output gradient is ",
                grad_output.rows, "x", grad_output.cols, ", expected ", nl, "x", d_);
  // Under sequence parallelism every rank gathers the whole gradient: each
  // scatters all tokens into its own rows of wte.
  const TpGroup tp =
      TpGroup::for_backward(ctx.tp(), ctx.host(), name_, ctx.tp_size, "backward_input");
  tp.require_sequence(ctx.local_seq != ctx.seq, "backward_input");
  ctx.dy.resize(static_cast<std::size_t>(n * d_));
  tp.rows_to_whole(grad_output.data, ctx.batch, ctx.local_seq, d_, ctx.dy.data(),
                   "the embeddings' output gradient");
  ctx.input_grad_done = true;
  return {};
}

void GptEmbedding::backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                                   std::span<float* const> grads) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  auto& ctx = dynamic_cast<EmbeddingContext&>(ctx_base);
  TESSERA_CHECK(ctx.input_grad_done, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward_weight without backward_input on this context");
  TpGroup::for_backward(ctx.tp(), ctx.host(), name_, ctx.tp_size, "backward_weight")
      .require_sequence(ctx.local_seq != ctx.seq, "backward_weight");
  // The output gradient is whole: each rank scatters it into its own rows
  // of wte. wpe gets the rows this rank returned: every row in tensor mode
  // (the same whole gradient on every rank), this rank's positions under
  // sequence parallelism (its part, which the caller sums).
  const int64_t n = ctx.batch * ctx.seq;
  float* dwte = grads[0];
  float* dwpe = grads[1];
  for (int64_t r = 0; r < n; ++r) {
    const int64_t tok = ctx.tokens[static_cast<std::size_t>(r)] - ctx.vocab_lo;
    const int64_t t = r % ctx.seq;
    const float* g = ctx.dy.data() + r * d_;
    const bool own_position = t >= ctx.first_pos && t < ctx.first_pos + ctx.local_seq;
    if (tok < 0 || tok >= ctx.vocab_rows) {
      if (own_position) kernels::add_into(dwpe + t * d_, g, d_);
      continue;
    }
    if (!own_position) {
      kernels::add_into(dwte + tok * d_, g, d_);
      continue;
    }
    for (int64_t j = 0; j < d_; ++j) {
      dwte[tok * d_ + j] += g[j];
      dwpe[t * d_ + j] += g[j];
    }
  }
  ctx.input_grad_done = false;
}

ConstView GptEmbedding::backward(UnitContext& ctx_base, std::span<const float* const> params,
                                 std::span<float* const> grads, ConstView grad_output) const {
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  (void)backward_input(ctx_base, params, grad_output);
  backward_weight(ctx_base, params, grads);
  return {};
}

}  // namespace tessera::model

// The llama's token embedding unit (see llama.hpp).
#include <algorithm>
#include <utility>
#include <vector>

#include "llama.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/tensor_parallel.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {
namespace {

struct LlamaEmbeddingContext final : UnitContext {
  int64_t rows = -1;      // tokens of the batch (all of them, also with sequence parallelism)
  int64_t examples = 0;   // sequences of the batch
  int64_t seq_local = 0;  // this rank's positions of each with sequence parallelism
  bool sequence = false;  // the forward ran with sequence parallelism
  int32_t tp_size = 1;    // tensor-parallel group of the forward
  int64_t vocab_lo = 0;   // this rank's rows of wte: [vocab_lo, vocab_lo + vocab_rows)
  int64_t vocab_rows = 0;
  bool input_grad_done = false;  // backward_input ran; backward_weight may follow
  std::vector<int32_t> tokens;
  std::vector<float> y;  // this rank's rows of the output with sequence parallelism
  std::vector<float>
      dy;  // the output gradient (all rows), kept by backward_input for the weight half
  [[nodiscard]] std::size_t bytes() const noexcept override {
    return tokens.capacity() * sizeof(int32_t) + (y.capacity() + dy.capacity()) * sizeof(float);
  }
};

}  // namespace

LlamaEmbedding::LlamaEmbedding(std::string name, const LlamaConfig& config)
    : ConventionUnit(std::move(name), true, false),
      vocab_(config.vocab),
      d_(config.d_model),
      seq_len_(config.seq_len) {
  specs_.push_back({"wte", {vocab_, d_}, SplitHint::row, {}});
}

UnitCost LlamaEmbedding::cost() const { return embedding_cost(seq_len_, d_); }

std::unique_ptr<UnitContext> LlamaEmbedding::make_context() const {
  return std::make_unique<LlamaEmbeddingContext>();
}

void LlamaEmbedding::check_tensor_parallel(int32_t size, uint32_t flags) const {
  const TpGroup tp = TpGroup::for_check(size, flags, name_);
  tp.require_divisible("vocab", vocab_);
  (void)tp.local_positions("key 'seq_len'", seq_len_);
}

ConstView LlamaEmbedding::forward(UnitContext& ctx_base, std::span<const float* const> params,
                                  const UnitInput& input) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& ctx = dynamic_cast<LlamaEmbeddingContext&>(ctx_base);
  const BatchView* batch = input.batch;
  TESSERA_CHECK(batch != nullptr && batch->is_sequence() &&
                    static_cast<int64_t>(batch->tokens.size()) == batch->size * batch->seq_len,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': needs a sequence batch");
  const int64_t n = batch->size * batch->seq_len;
  const float* wte = params[0];
  for (int64_t r = 0; r < n; ++r) {
    const int32_t tok = batch->tokens[static_cast<std::size_t>(r)];
    TESSERA_CHECK(tok >= 0 && tok < vocab_, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                  "': token ", tok, " at position ", r, " is outside [0, ", vocab_, ")");
  }
  // Vocabulary-parallel under a group: this rank holds rows [lo, lo +
  // vocab/tp) of wte; a token outside them looks up zeros, and the sum over
  // the group is the whole lookup.
  // With sequence parallelism every rank looks up all tokens into a
  // transient buffer and the sum is scattered: each rank gets its seq/tp
  // positions of every sequence.
  const TpGroup tp(input.tp, ctx_base.host(), name_);
  tp.require_divisible("vocab", vocab_);
  const int64_t seq_l = tp.local_positions("key 'seq_len'", batch->seq_len);
  const int64_t nl = batch->size * seq_l;  // rows of the output (n without sequence parallelism)
  ctx.rows = n;
  ctx.examples = batch->size;
  ctx.seq_local = seq_l;
  ctx.sequence = tp.sequence();
  ctx.tp_size = tp.size();
  ctx.vocab_rows = vocab_ / tp.size();
  ctx.vocab_lo = ctx.vocab_rows * tp.rank();
  ctx.input_grad_done = false;
  ctx.tokens.assign(batch->tokens.begin(), batch->tokens.end());
  ctx.y.resize(static_cast<std::size_t>(nl * d_));
  std::vector<float> partial;  // all rows' lookups before the scatter
  if (ctx.sequence) partial.resize(static_cast<std::size_t>(n * d_));
  float* lookups = ctx.sequence ? partial.data() : ctx.y.data();
  for (int64_t r = 0; r < n; ++r) {
    const int64_t local = ctx.tokens[static_cast<std::size_t>(r)] - ctx.vocab_lo;
    float* dst = lookups + r * d_;
    if (local >= 0 && local < ctx.vocab_rows) {
      std::copy(wte + local * d_, wte + (local + 1) * d_, dst);
    } else {
      std::fill(dst, dst + d_, 0.0f);
    }
  }
  tp.partial_to_rows(lookups, batch->size, seq_l, d_, ctx.y.data(), "the token embeddings");
  return {ctx.y.data(), nl, d_};
}

ConstView LlamaEmbedding::backward_input(UnitContext& ctx_base,
                                         std::span<const float* const> params,
                                         ConstView grad_output) const {
  // The first unit has no input gradient: the output gradient is kept for
  // the weight half's scatter.
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  auto& ctx = dynamic_cast<LlamaEmbeddingContext&>(ctx_base);
  TESSERA_CHECK(ctx.rows >= 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward without a forward on this context");
  const int64_t n = ctx.rows;
  const int64_t nl = ctx.examples * ctx.seq_local;  // n without sequence parallelism
  TESSERA_CHECK(!grad_output.empty() && grad_output.rows == nl && grad_output.cols == d_,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': output gradient is ",
                grad_output.rows, "x", grad_output.cols, ", expected ", nl, "x", d_);
  if (ctx.sequence) {
    // This rank's rows of the gradient, gathered: the weight half scatters
    // every token into this rank's vocabulary rows.
    const TpGroup tp =
        TpGroup::for_backward(ctx.tp(), ctx.host(), name_, ctx.tp_size, "backward_input");
    tp.require_sequence(ctx.sequence, "backward_input");
    ctx.dy.resize(static_cast<std::size_t>(n * d_));
    tp.gather_rows(grad_output.data, ctx.examples, ctx.seq_local, d_, ctx.dy.data(),
                   "the token embeddings' gradient");
  } else {
    ctx.dy.assign(grad_output.data, grad_output.data + n * d_);
  }
  ctx.input_grad_done = true;
  return {};
}

void LlamaEmbedding::backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                                     std::span<float* const> grads) const {
  kernels::check_count(name_, "parameter", params.size(), specs_.size());
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  auto& ctx = dynamic_cast<LlamaEmbeddingContext&>(ctx_base);
  TESSERA_CHECK(ctx.input_grad_done, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward_weight without backward_input on this context");
  const TpGroup tp =
      TpGroup::for_backward(ctx.tp(), ctx.host(), name_, ctx.tp_size, "backward_weight");
  tp.require_sequence(ctx.sequence, "backward_weight");
  // The output gradient is replicated (gathered with sequence
  // parallelism): each rank scatters it into its own rows of wte.
  float* dwte = grads[0];
  for (int64_t r = 0; r < ctx.rows; ++r) {
    const int64_t tok = ctx.tokens[static_cast<std::size_t>(r)] - ctx.vocab_lo;
    if (tok < 0 || tok >= ctx.vocab_rows) continue;
    const float* g = ctx.dy.data() + r * d_;
    float* dst = dwte + tok * d_;
    for (int64_t j = 0; j < d_; ++j) dst[j] += g[j];
  }
  ctx.input_grad_done = false;
}

ConstView LlamaEmbedding::backward(UnitContext& ctx_base, std::span<const float* const> params,
                                   std::span<float* const> grads, ConstView grad_output) const {
  kernels::check_count(name_, "gradient", grads.size(), specs_.size());
  (void)backward_input(ctx_base, params, grad_output);
  backward_weight(ctx_base, params, grads);
  return {};
}

}  // namespace tessera::model

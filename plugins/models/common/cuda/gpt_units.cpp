// gpt's CUDA units (see tessera/models/cuda_units.hpp): the embedding, the
// pre-LN decoder block with fused causal attention (no seq×seq matrix in
// device memory: the backward recomputes the probabilities from q, k and
// each row's log-sum-exp), and the final LayerNorm with the head. The same
// arithmetic as GptEmbedding, GptBlock and GptHead, in an order of
// summation of the device's. llama's embedding and head are the same units
// with its norm and layout (its block: llama_units.cpp).
//
// Under a tensor-parallel group they split as their twins do: the
// embedding and the head by vocabulary (a rank's rows of the table, its
// columns of the logits, the cross-entropy over the group), the block's
// attention by heads and its MLP by columns, each row-parallel product's
// partial sums summed over the group before its bias and residual, and
// the input gradients of the column-parallel products likewise. Under
// sequence parallelism the norms and residuals work on this rank's
// positions of each example, gathered whole before the column products,
// and the sums are reduce-scattered back to them.
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "device_support.hpp"
#include "tessera/models/gpt_params.hpp"

namespace tessera::model::cuda {
namespace {

// ---- embedding ----

struct EmbeddingContext final : UnitContext {
  int64_t batch = -1;
  int64_t seq = 0;
  int64_t local_seq = 0;  // positions of each example this rank returns
  int64_t first_pos = 0;  // the first of them
  bool input_grad_done = false;
  int32_t tp_size = 1;    // the forward's group size (backward's must match)
  VocabRange held{0, 0};  // the rows of the vocabulary this rank's table holds
  Operands params;
  GradTargets grads;
  // dx: the whole output gradient, kept for the weight half (dy: this
  // rank's rows of it under sequence parallelism); lookup: every row's
  // lookup before the reduce-scatter; token_rows: the rows grouped by the
  // held tokens (TokenRows: its tokens, starts and order one after another),
  // made by the weight half from the batch's ids.
  DeviceArray tokens, token_rows, dx, dy, lookup;
  std::vector<int32_t> ids;
  int64_t distinct = 0;  // the held tokens in token_rows
  DeviceArray x{true};
  RowExchange rows;
  [[nodiscard]] std::size_t bytes() const noexcept override {
    return tokens.bytes() + token_rows.bytes() + x.bytes() + dx.bytes() + dy.bytes() +
           lookup.bytes();
  }
  [[nodiscard]] TokenRowsView token_rows_view() const noexcept {
    const auto* base = token_rows.get<const int32_t>();
    return {base, base + distinct, base + 2 * distinct + 1, distinct};
  }
};

// The token embedding, plus learned positions (gpt's "wpe", the second
// parameter) when `positions`; llama's has none.
class CudaEmbedding final : public TwinnedUnit {
 public:
  CudaEmbedding(const tessera_host_api* host, std::unique_ptr<Unit> twin, int64_t vocab, int64_t d,
                int64_t seq_len, bool positions)
      : TwinnedUnit(host, std::move(twin)),
        vocab_(vocab),
        d_(d),
        seq_len_(seq_len),
        positions_(positions) {}

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override {
    return std::make_unique<EmbeddingContext>();
  }

  ConstView forward(UnitContext& ctx_base, std::span<const float* const> params,
                    const UnitInput& input) const override {
    check_counts(params.size(), 0);
    require_sequences(*this, input);
    auto& c = dynamic_cast<EmbeddingContext&>(ctx_base);
    const int64_t seq = input.batch->seq_len;
    TESSERA_CHECK(seq <= seq_len_, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                  "': the batch's sequences have ", seq, " tokens, more than seq_len ", seq_len_);
    // Vocabulary-parallel: this rank's vocab/tp rows of the table; a token
    // it does not hold looks up zeros, and the sum over the group is the
    // whole lookup (with its position, added where the token is held),
    // under sequence parallelism reduce-scattered to this rank's positions.
    const TpGroup tp(input.tp, host_.raw(), name_);
    tp.require_divisible("vocab", vocab_);
    const int64_t local_seq = tp.local_positions("the batch's seq_len", seq);
    Lane& l = lane(host_, name_);
    c.batch = input.batch->size;
    c.seq = seq;
    c.local_seq = local_seq;
    c.first_pos = tp.first_position(local_seq);
    c.tp_size = tp.size();
    c.held = {vocab_ / tp.size() * tp.rank(), vocab_ / tp.size()};
    c.input_grad_done = false;
    const int32_t* tokens =
        upload_ids(input.batch->tokens, vocab_, "token", "at position", c.tokens, l, name_);
    c.ids.assign(input.batch->tokens.begin(), input.batch->tokens.end());
    c.params.bind(params, specs_, l, name_, tp.size());
    const int64_t n = c.batch * seq;
    const int64_t nl = c.batch * local_seq;
    float* x = c.x.ensure(static_cast<size_t>(nl * d_), l, name_);
    float* lookup = tp.sequence() ? c.lookup.ensure(static_cast<size_t>(n * d_), l, name_) : x;
    embedding_forward(tokens, c.params[0], positions_ ? c.params[1] : nullptr, c.batch, seq, d_,
                      c.held, lookup, l.stream);
    partial_to_rows_device(tp, lookup, c.batch, local_seq, d_, x, c.rows, l, "the token embeddings",
                           name_);
    finish_call(l, name_);
    return {x, nl, d_};
  }

  // No input gradient: the output gradient is kept for the weight half,
  // gathered whole under sequence parallelism (every rank scatters every
  // token into its rows of the table).
  ConstView backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                           ConstView grad_output) const override {
    check_counts(params.size(), 0);
    auto& c = dynamic_cast<EmbeddingContext&>(ctx_base);
    require_forward(c.batch >= 0);
    const TpGroup tp = backward_group(c, "backward_input");
    const int64_t n = c.batch * c.seq;
    Lane& l = lane(host_, name_);
    if (tp.sequence()) {
      const float* mine =
          kept_output_gradient(*this, grad_output, c.batch * c.local_seq, d_, c.dy, l);
      rows_to_whole_device(tp, mine, c.batch, c.local_seq, d_,
                           c.dx.ensure(static_cast<size_t>(n * d_), l, name_), c.rows, l,
                           "the embeddings' output gradient", name_);
    } else {
      kept_output_gradient(*this, grad_output, n, d_, c.dx, l);
    }
    release_all({&c.tokens, &c.lookup}, l, name_);
    c.input_grad_done = true;
    finish_call(l, name_);
    return {};
  }

  // The rows' gradients scattered into the table (this rank's rows of it)
  // and the positions': every row in tensor mode (the same whole gradient
  // on every rank), this rank's positions under sequence parallelism (its
  // part, which the caller sums).
  void backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                       std::span<float* const> grads) const override {
    check_counts(params.size(), grads.size());
    auto& c = dynamic_cast<EmbeddingContext&>(ctx_base);
    take_input_half(c.input_grad_done);
    const TpGroup tp = backward_group(c, "backward_weight");
    Lane& l = lane(host_, name_);
    c.grads.bind(grads, specs_, l, name_, c.tp_size);
    float* dwpe = positions_ ? c.grads[1] : nullptr;
    upload_token_rows(c, l);
    embedding_backward(c.token_rows_view(), c.dx.get(), c.batch, c.seq, d_, c.held, c.grads[0],
                       tp.sequence() ? nullptr : dwpe, l.stream);
    if (tp.sequence() && dwpe != nullptr) {
      position_backward(c.dy.get(), c.batch, c.local_seq, d_, dwpe + c.first_pos * d_, l.stream);
    }
    c.grads.finish(l, name_);
    finish_call(l, name_);
  }

 private:
  // The batch's rows grouped by the tokens this rank's table holds, on the
  // device for the weight half's scatter.
  void upload_token_rows(EmbeddingContext& c, const Lane& l) const {
    const TokenRows t = TokenRows::of(c.ids.data(), static_cast<int64_t>(c.ids.size()), c.held);
    std::vector<int32_t> all;
    all.reserve(t.tokens.size() + t.starts.size() + t.order.size());
    for (const std::vector<int32_t>* part : {&t.tokens, &t.starts, &t.order}) {
      all.insert(all.end(), part->begin(), part->end());
    }
    c.distinct = static_cast<int64_t>(t.tokens.size());
    auto* device = c.token_rows.ensure<int32_t>(all.size(), l, name_);
    check(cudaMemcpyAsync(device, all.data(), all.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                          l.stream),
          name_, "cudaMemcpyAsync");  // from pageable memory: staged before it returns
  }

  [[nodiscard]] TpGroup backward_group(const EmbeddingContext& c, const char* call) const {
    TpGroup tp = TpGroup::for_backward(c.tp(), host_.raw(), name_, c.tp_size, call);
    tp.require_sequence(c.local_seq != c.seq, call);
    return tp;
  }
  int64_t vocab_;
  int64_t d_;
  int64_t seq_len_;
  bool positions_;
};

// ---- decoder block ----

using enum gpt_block::Param;

struct GptBlockContext final : UnitContext {
  int64_t batch = -1;
  int64_t seq = 0;
  int64_t local_seq = 0;  // positions of each example this rank holds (seq/tp in sequence mode)
  int64_t first_pos = 0;  // the first of them
  int32_t tp_size = 1;    // the forward's group size (backward's must match)
  bool input_grad_done = false;
  Operands params;
  GradTargets grads;
  // Kept from forward for backward. Under sequence parallelism x, the
  // LayerNorms' statistics and x2 cover this rank's rows only (y too); h1
  // and h2 are whole.
  DeviceArray x, mean1, rstd1, lse, x2, mean2, rstd2, u;
  // 16-bit under bf16 or f16: the products' inputs alone, and the
  // attention's inputs and output.
  KeptOperand h1, h2, act, qkv, attn;
  // Backward scratch, and what the input half keeps for the weight half
  // (dy, du, dx2, dqkv whole and the LayerNorms' parameter gradients).
  DeviceArray dy, du, dh2, dx2, dattn, delta, dqkv, dh1;
  DeviceArray dln1g, dln1b, dln2g, dln2b;
  // Sequence parallelism: this rank's rows of the output gradient and of
  // dx2, every row's partial sums before the reduce-scatter, and a
  // LayerNorm's rows before the gather.
  DeviceArray dy_rows, dx2_rows, partial, norm_rows;
  DeviceArray y{true}, dx{true};
  RowExchange rows;
  [[nodiscard]] std::size_t bytes() const noexcept override {
    std::size_t total = h1.bytes() + h2.bytes() + act.bytes() + qkv.bytes() + attn.bytes();
    for (const DeviceArray* a :
         {&x,     &mean1, &rstd1, &lse,   &x2,      &mean2,    &rstd2,   &u,        &dy,
          &du,    &dh2,   &dx2,   &dattn, &delta,   &dqkv,     &dh1,     &dln1g,    &dln1b,
          &dln2g, &dln2b, &y,     &dx,    &dy_rows, &dx2_rows, &partial, &norm_rows}) {
      total += a->bytes();
    }
    return total;
  }
};

// A rank's share of a block in a tensor-parallel group of `size`: heads /
// size attention heads, their dl = d / size columns of each of q, k and v
// and rows of the attention projection, and hidden / size columns of the
// MLP (all of it without a group).
struct GptShard {
  int64_t heads;
  int64_t dl;
  int64_t hidden;
};

class CudaGptBlock final : public TwinnedUnit {
 public:
  CudaGptBlock(const tessera_host_api* host, std::unique_ptr<Unit> twin, int64_t d, int64_t heads,
               int64_t hidden)
      : TwinnedUnit(host, std::move(twin)), d_(d), heads_(heads), hidden_(hidden) {}

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override {
    return std::make_unique<GptBlockContext>();
  }

  ConstView forward(UnitContext& ctx_base, std::span<const float* const> params,
                    const UnitInput& input) const override {
    check_counts(params.size(), 0);
    require_sequences(*this, input);
    auto& c = dynamic_cast<GptBlockContext&>(ctx_base);
    // Under sequence parallelism x, the LayerNorms and the residuals cover
    // this rank's positions of each example (nl rows): the LayerNorms'
    // outputs are gathered whole before q|k|v and fc, and the row-parallel
    // sums reduce-scattered back to this rank's rows.
    const TpGroup tp(input.tp, host_.raw(), name_);
    tp.require_divisible("heads", heads_);
    const int64_t local_seq = tp.local_positions("the batch's seq_len", input.batch->seq_len);
    Lane& l = lane(host_, name_);
    const int64_t nl = take_rows(*this, d_, input, c.x, l, local_seq);
    c.batch = input.batch->size;
    c.seq = input.batch->seq_len;
    c.local_seq = local_seq;
    c.first_pos = tp.first_position(local_seq);
    c.tp_size = tp.size();
    c.input_grad_done = false;
    const int64_t n = c.batch * c.seq;
    const int64_t d = d_;
    const GptShard s = shard(tp.size());
    const int64_t hid = s.hidden;
    const auto un = static_cast<size_t>(n);
    const auto unl = static_cast<size_t>(nl);
    c.params.bind(params, specs_, l, name_, tp.size());
    const Operands& p = c.params;
    const BlockRows rows = block_rows(tp, c, l);
    float* h1 = c.h1.f32().ensure(un * d, l, name_);
    float* mean1 = c.mean1.ensure(unl, l, name_);
    float* rstd1 = c.rstd1.ensure(unl, l, name_);
    rows.norm_to_whole(c.norm_rows, h1, "the first LayerNorm's output", [&](float* out) {
      layernorm_forward(c.x.get(), p[kLn1G], p[kLn1B], nl, d, out, mean1, rstd1, l.stream);
    });
    float* qkv = c.qkv.f32().ensure(un * 3 * s.dl, l, name_);
    c.h1.keep(un * d, l, name_);
    gemm(l, false, false, n, 3 * s.dl, d, 1.0f, c.h1.operand(), d, p[kQkvW], 3 * s.dl, 0.0f, qkv,
         3 * s.dl, name_, {.kind = Fused::bias, .bias = p[kQkvB]});
    c.qkv.keep(un * 3 * s.dl, l, name_);
    attention_forward(attention(c.qkv, c.batch, c.seq, s), c.attn.store(un * s.dl, l, name_),
                      c.lse.ensure(un * s.heads, l, name_), l.stream);
    // The attention projection is row-parallel: partial sums, then the
    // bias and the residual on this rank's rows.
    float* x2 = c.x2.ensure(unl * d, l, name_);
    rows.row_parallel(c.attn.operand(), p[kAttnProjW], s.dl, x2,
                      "the attention projection's output", p[kAttnProjB], c.x.get());
    float* h2 = c.h2.f32().ensure(un * d, l, name_);
    float* mean2 = c.mean2.ensure(unl, l, name_);
    float* rstd2 = c.rstd2.ensure(unl, l, name_);
    rows.norm_to_whole(c.norm_rows, h2, "the second LayerNorm's output", [&](float* out) {
      layernorm_forward(x2, p[kLn2G], p[kLn2B], nl, d, out, mean2, rstd2, l.stream);
    });
    float* u = c.u.ensure(un * hid, l, name_);
    float* act = c.act.f32().ensure(un * hid, l, name_);
    // u = h2·fc_w + fc_b (kept for the GELU's gradient), act = gelu(u).
    c.h2.keep(un * d, l, name_);
    gemm(l, false, false, n, hid, d, 1.0f, c.h2.operand(), d, p[kFcW], hid, 0.0f, act, hid, name_,
         {.kind = Fused::gelu_bias, .bias = p[kFcB], .aux = u});
    c.act.keep(un * hid, l, name_);
    float* y = c.y.ensure(unl * d, l, name_);
    rows.row_parallel(c.act.operand(), p[kProjW], hid, y, "the MLP's output", p[kProjB], x2);
    finish_call(l, name_);
    return {y, nl, d};
  }

  // Every input-gradient product; keeps the output gradient dy, du, dx2
  // and dqkv (the products' output gradients, whole) and the LayerNorms'
  // gain and bias gradients for the weight half. The column-parallel
  // products' input gradients are partial sums over the group.
  ConstView backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                           ConstView grad_output) const override {
    check_counts(params.size(), 0);
    auto& c = dynamic_cast<GptBlockContext&>(ctx_base);
    require_forward(c.batch >= 0);
    const TpGroup tp = backward_group(c, "backward_input");
    const int64_t d = d_;
    const GptShard s = shard(tp.size());
    const int64_t hid = s.hidden;
    const int64_t n = c.batch * c.seq;
    const int64_t nl = c.batch * c.local_seq;
    const auto un = static_cast<size_t>(n);
    const auto unl = static_cast<size_t>(nl);
    Lane& l = lane(host_, name_);
    // The output gradient, this rank's rows, and whole (gathered under
    // sequence parallelism: proj's input and weight gradients need every row).
    const float* dy_rows =
        kept_output_gradient(*this, grad_output, nl, d, tp.sequence() ? c.dy_rows : c.dy, l);
    const BlockRows rows = block_rows(tp, c, l);
    float* dy = c.dy.ensure(un * d, l, name_);
    rows.to_whole(dy_rows, dy, "the block's output gradient");
    c.params.bind(params, specs_, l, name_, tp.size());
    const Operands& p = c.params;
    // MLP: y = x2 + gelu(h2·fc_w + fc_b)·proj_w + proj_b.
    // du = (dy·proj_wᵀ) ⊙ gelu'(u).
    float* du = c.du.ensure(un * hid, l, name_);
    gemm(l, false, true, n, hid, d, 1.0f, dy, d, p[kProjW], d, 0.0f, du, hid, name_,
         {.kind = Fused::dgelu, .aux = c.u.get()});
    // fc is column-parallel: each rank has its columns' part of ln2's
    // output gradient, summed to this rank's rows.
    float* dh2 = c.dh2.ensure(unl * d, l, name_);
    rows.column_input_gradient(du, p[kFcW], hid, dh2, "the MLP's input gradient");
    // The residual's gradient plus the second LayerNorm's, on this rank's rows.
    float* dx2_rows =
        tp.sequence() ? c.dx2_rows.ensure(unl * d, l, name_) : c.dx2.ensure(un * d, l, name_);
    copy_device(dx2_rows, dy_rows, unl * d, l, name_);
    layernorm_backward_input(c.x2.get(), p[kLn2G], c.mean2.get(), c.rstd2.get(), dh2, nl, d,
                             dx2_rows, true, l.stream);
    layernorm_backward_params(c.x2.get(), c.mean2.get(), c.rstd2.get(), dh2, nl, d,
                              zeroed(c.dln2g, d, l, name_), zeroed(c.dln2b, d, l, name_), l.stream);
    float* dx2 = c.dx2.ensure(un * d, l, name_);
    rows.to_whole(dx2_rows, dx2, "the attention projection's output gradient");
    // Attention: x2 = x + attn·attn_proj_w + attn_proj_b.
    float* dattn = c.dattn.ensure(un * s.dl, l, name_);
    gemm(l, false, true, n, s.dl, d, 1.0f, dx2, d, p[kAttnProjW], d, 0.0f, dattn, s.dl, name_);
    float* dqkv = c.dqkv.ensure(un * 3 * s.dl, l, name_);
    attention_backward(attention(c.qkv, c.batch, c.seq, s), c.attn.operand().data, c.lse.get(),
                       dattn, c.delta.ensure(un * s.heads, l, name_), dqkv, dqkv + s.dl,
                       dqkv + 2 * s.dl, l.stream);
    float* dh1 = c.dh1.ensure(unl * d, l, name_);
    rows.column_input_gradient(dqkv, p[kQkvW], 3 * s.dl, dh1, "the attention's input gradient");
    // The input's gradient: the residual's plus the first LayerNorm's.
    float* dx = c.dx.ensure(unl * d, l, name_);
    copy_device(dx, dx2_rows, unl * d, l, name_);
    layernorm_backward_input(c.x.get(), p[kLn1G], c.mean1.get(), c.rstd1.get(), dh1, nl, d, dx,
                             true, l.stream);
    layernorm_backward_params(c.x.get(), c.mean1.get(), c.rstd1.get(), dh1, nl, d,
                              zeroed(c.dln1g, d, l, name_), zeroed(c.dln1b, d, l, name_), l.stream);
    c.qkv.release(l, name_);
    release_all({&c.x, &c.mean1, &c.rstd1, &c.lse, &c.x2, &c.mean2, &c.rstd2, &c.u, &c.dh2,
                 &c.dattn, &c.delta, &c.dh1, &c.dy_rows, &c.dx2_rows, &c.partial, &c.norm_rows},
                l, name_);
    c.input_grad_done = true;
    finish_call(l, name_);
    return {dx, nl, d};
  }

  // The weight products xᵀ·dy of the four projections, their biases' row
  // sums, and the LayerNorms' kept gradients: this rank's shards, and in
  // tensor mode the same whole gradient of every replicated parameter on
  // every rank of the group; under sequence parallelism the replicated
  // ones' part from this rank's rows (the caller sums the parts).
  void backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                       std::span<float* const> grads) const override {
    check_counts(params.size(), grads.size());
    auto& c = dynamic_cast<GptBlockContext&>(ctx_base);
    take_input_half(c.input_grad_done);
    (void)backward_group(c, "backward_weight");
    const int64_t d = d_;
    const GptShard s = shard(c.tp_size);
    const int64_t hid = s.hidden;
    const int64_t n = c.batch * c.seq;
    Lane& l = lane(host_, name_);
    c.grads.bind(grads, specs_, l, name_, c.tp_size);
    const GradTargets& g = c.grads;
    gemm(l, true, false, hid, d, n, 1.0f, c.act.operand(), hid, c.dy.get(), d, 1.0f, g[kProjW], d,
         name_);
    add_row_sums(c, c.dy.get(), g[kProjB], l);
    gemm(l, true, false, d, hid, n, 1.0f, c.h2.operand(), d, c.du.get(), hid, 1.0f, g[kFcW], hid,
         name_);
    column_sum_add(c.du.get(), n, hid, g[kFcB], l.stream);
    add_into(g[kLn2G], c.dln2g.get(), d, l.stream);
    add_into(g[kLn2B], c.dln2b.get(), d, l.stream);
    gemm(l, true, false, s.dl, d, n, 1.0f, c.attn.operand(), s.dl, c.dx2.get(), d, 1.0f,
         g[kAttnProjW], d, name_);
    add_row_sums(c, c.dx2.get(), g[kAttnProjB], l);
    gemm(l, true, false, d, 3 * s.dl, n, 1.0f, c.h1.operand(), d, c.dqkv.get(), 3 * s.dl, 1.0f,
         g[kQkvW], 3 * s.dl, name_);
    column_sum_add(c.dqkv.get(), n, 3 * s.dl, g[kQkvB], l.stream);
    add_into(g[kLn1G], c.dln1g.get(), d, l.stream);
    add_into(g[kLn1B], c.dln1b.get(), d, l.stream);
    c.grads.finish(l, name_);
    finish_call(l, name_);
  }

 private:
  [[nodiscard]] GptShard shard(int32_t size) const noexcept {
    return {heads_ / size, d_ / size, hidden_ / size};
  }
  // The group of a backward call (`call`), which must be the forward's.
  [[nodiscard]] TpGroup backward_group(const GptBlockContext& c, const char* call) const {
    TpGroup tp = TpGroup::for_backward(c.tp(), host_.raw(), name_, c.tp_size, call);
    tp.require_sequence(c.local_seq != c.seq, call);
    return tp;
  }
  [[nodiscard]] BlockRows block_rows(const TpGroup& tp, GptBlockContext& c, Lane& l) const {
    return {tp, c.batch, c.seq, c.local_seq, d_, c.partial, c.rows, l, name_};
  }
  // db += the column sums of dz [batch·seq, d]: every row in tensor mode,
  // this rank's positions of each example under sequence parallelism.
  void add_row_sums(const GptBlockContext& c, const float* dz, float* db, const Lane& l) const {
    if (c.local_seq == c.seq) {
      column_sum_add(dz, c.batch * c.seq, d_, db, l.stream);
      return;
    }
    for (int64_t b = 0; b < c.batch; ++b) {
      column_sum_add(dz + (b * c.seq + c.first_pos) * d_, c.local_seq, d_, db, l.stream);
    }
  }
  // This rank's fused q|k|v [batch·seq, 3·dl] as the attention kernels read it.
  [[nodiscard]] Attention attention(const KeptOperand& qkv, int64_t batch, int64_t seq,
                                    const GptShard& s) const {
    const int64_t head_width = d_ / heads_;
    Attention a{qkv.at(0),
                qkv.at(s.dl),
                qkv.at(2 * s.dl),
                3 * s.dl,
                3 * s.dl,
                batch,
                seq,
                s.heads,
                s.heads,
                head_width,
                1.0f / std::sqrt(static_cast<float>(head_width))};
    a.elem = qkv.elem();
    return a;
  }
  int64_t d_;
  int64_t heads_;
  int64_t hidden_;
};

// ---- final norm and head ----

struct TokenHeadContext final : UnitContext {
  int64_t rows = -1;  // all of them (the logits' rows)
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t local_seq = 0;  // positions of each example this rank's input holds
  bool input_grad_done = false;
  int32_t tp_size = 1;    // the forward's group size (backward's must match)
  VocabRange held{0, 0};  // the columns of the logits this rank computes
  float scale = 1.0f;
  float loss = 0.0f;
  Operands params;
  GradTargets grads;
  // Under sequence parallelism x, the norm's statistics and dh (and dx)
  // cover this rank's rows; h, the logits and their gradient all rows.
  // The logits are given back once the cross-entropy has its probabilities.
  DeviceArray x, mean, rstd, logits, targets, dlogits, dh, norm_rows, partial;
  KeptOperand h;       // the product's input alone (16-bit under bf16 or f16)
  DeviceArray dg, db;  // the norm's parameter gradients, kept for the weight half
  CrossEntropyArrays xent;
  DeviceArray dx{true};
  RowExchange exchange;
  [[nodiscard]] std::size_t bytes() const noexcept override {
    std::size_t total = h.bytes();
    for (const DeviceArray* a : {&x, &mean, &rstd, &logits, &xent.probs, &targets, &xent.row_loss,
                                 &dlogits, &dh, &dg, &db, &dx, &norm_rows, &partial}) {
      total += a->bytes();
    }
    return total;
  }
};

// The final norm and the head over the vocabulary with its softmax
// cross-entropy. gpt's: LayerNorm ("lnf_g", "lnf_b") and w [vocab, d]
// (logits = h·wᵀ, w possibly the tied wte). llama's: RMSNorm ("norm_g")
// and w [d, vocab] (logits = h·w).
class CudaHead final : public TwinnedUnit {
 public:
  enum class Norm { layer, rms };
  CudaHead(const tessera_host_api* host, std::unique_ptr<Unit> twin, int64_t vocab, int64_t d,
           Norm norm, float eps)
      : TwinnedUnit(host, std::move(twin)),
        vocab_(vocab),
        d_(d),
        norm_(norm),
        eps_(eps),
        w_(norm == Norm::layer ? 2 : 1) {}

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override {
    return std::make_unique<TokenHeadContext>();
  }

  ConstView forward(UnitContext& ctx_base, std::span<const float* const> params,
                    const UnitInput& input) const override {
    check_counts(params.size(), 0);
    require_sequences(*this, input);
    auto& c = dynamic_cast<TokenHeadContext&>(ctx_base);
    // Vocabulary-parallel: this rank's vocab/tp rows (gpt) or columns
    // (llama) of w give its columns of the logits, and the cross-entropy
    // combines the columns' maxima, sums and target logits over the group.
    // The final norm is replicated; under sequence parallelism it runs on
    // this rank's rows, and its output is gathered whole for the logits.
    const TpGroup group(input.tp, host_.raw(), name_);
    group.require_divisible("vocab", vocab_);
    const int64_t local_seq = group.local_positions("the batch's seq_len", input.batch->seq_len);
    Lane& l = lane(host_, name_);
    const int64_t nl = take_rows(*this, d_, input, c.x, l, local_seq);
    const int64_t n = input.batch->size * input.batch->seq_len;
    TESSERA_CHECK(static_cast<int64_t>(input.batch->targets.size()) == n,
                  TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': ", input.batch->targets.size(),
                  " targets for ", n, " rows");
    const auto un = static_cast<size_t>(n);
    const auto unl = static_cast<size_t>(nl);
    c.rows = n;
    c.batch = input.batch->size;
    c.seq = input.batch->seq_len;
    c.local_seq = local_seq;
    c.scale = input.loss_scale;
    c.input_grad_done = false;
    c.tp_size = group.size();
    c.held = {vocab_ / group.size() * group.rank(), vocab_ / group.size()};
    const int64_t cols = c.held.rows;
    const int32_t* targets =
        upload_ids(input.batch->targets, vocab_, "target", "at position", c.targets, l, name_);
    c.params.bind(params, specs_, l, name_, group.size());
    const Operands& p = c.params;
    float* h = c.h.f32().ensure(un * d_, l, name_);
    float* rstd = c.rstd.ensure(unl, l, name_);
    float* mean = norm_ == Norm::layer ? c.mean.ensure(unl, l, name_) : nullptr;
    block_rows(group, c, l)
        .norm_to_whole(c.norm_rows, h, "the final norm's output", [&](float* out) {
          if (norm_ == Norm::layer) {
            layernorm_forward(c.x.get(), p[0], p[1], nl, d_, out, mean, rstd, l.stream);
          } else {
            rmsnorm_forward(c.x.get(), p[0], nl, d_, eps_, out, rstd, l.stream);
          }
        });
    float* logits = c.logits.ensure(un * cols, l, name_);
    c.h.keep(un * d_, l, name_);
    gemm(l, false, vocab_rows(), n, cols, d_, 1.0f, c.h.operand(), d_, p[w_], w_stride(cols), 0.0f,
         logits, cols, name_);
    if (group.active()) {
      parallel_cross_entropy(l, group, logits, targets, n, cols, c.held.lo, input.loss_scale,
                             c.xent, &c.loss, name_);
    } else {
      cross_entropy(l, logits, targets, n, cols, input.loss_scale, c.xent, &c.loss, name_);
    }
    c.logits.release(l, name_);
    finish_call(l, name_);
    return {&c.loss, 1, 1};
  }

  // dlogits (kept), dh and dx; the norm's parameter gradients kept.
  ConstView backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                           ConstView grad_output) const override {
    check_counts(params.size(), 0);
    auto& c = dynamic_cast<TokenHeadContext&>(ctx_base);
    require_forward(c.rows >= 0);
    const TpGroup group = backward_group(c, "backward_input");
    Lane& l = lane(host_, name_);
    const float g_out = loss_gradient(grad_output, name_);
    const int64_t n = c.rows;
    const int64_t nl = c.batch * c.local_seq;
    const int64_t cols = c.held.rows;
    const auto un = static_cast<size_t>(n);
    const auto unl = static_cast<size_t>(nl);
    c.params.bind(params, specs_, l, name_, c.tp_size);
    const Operands& p = c.params;
    float* dlogits = c.dlogits.ensure(un * cols, l, name_);
    xent_backward(c.xent.probs.get(), c.targets.get<int32_t>(), n, cols, c.held.lo, c.scale * g_out,
                  dlogits, l.stream);
    // dh = dlogits·w (gpt: logits = h·wᵀ) or dlogits·wᵀ (llama: logits =
    // h·w); each rank's columns of the logits give a part of it, summed
    // into this rank's rows.
    const BlockRows rows = block_rows(group, c, l);
    float* dh = c.dh.ensure(unl * d_, l, name_);
    float* partial = rows.partial_for(dh);
    gemm(l, false, !vocab_rows(), n, d_, cols, 1.0f, dlogits, cols, p[w_], w_stride(cols), 0.0f,
         partial, d_, name_);
    rows.sum_partial(partial, dh, "the head's input gradient");
    float* dx = c.dx.ensure(unl * d_, l, name_);
    float* dg = zeroed(c.dg, static_cast<size_t>(d_), l, name_);
    if (norm_ == Norm::layer) {
      layernorm_backward_input(c.x.get(), p[0], c.mean.get(), c.rstd.get(), dh, nl, d_, dx, false,
                               l.stream);
      layernorm_backward_params(c.x.get(), c.mean.get(), c.rstd.get(), dh, nl, d_, dg,
                                zeroed(c.db, static_cast<size_t>(d_), l, name_), l.stream);
    } else {
      rmsnorm_backward_input(c.x.get(), p[0], c.rstd.get(), dh, nl, d_, dx, false, l.stream);
      rmsnorm_backward_params(c.x.get(), c.rstd.get(), dh, nl, d_, dg, l.stream);
    }
    release_all({&c.x, &c.mean, &c.rstd, &c.xent.probs, &c.xent.row_loss, &c.targets, &c.dh,
                 &c.norm_rows, &c.partial},
                l, name_);
    c.input_grad_done = true;
    finish_call(l, name_);
    return {dx, nl, d_};
  }

  // w's gradient from the kept dlogits, and the norm's.
  void backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                       std::span<float* const> grads) const override {
    check_counts(params.size(), grads.size());
    auto& c = dynamic_cast<TokenHeadContext&>(ctx_base);
    take_input_half(c.input_grad_done);
    (void)backward_group(c, "backward_weight");
    const int64_t n = c.rows;
    const int64_t cols = c.held.rows;
    Lane& l = lane(host_, name_);
    c.grads.bind(grads, specs_, l, name_, c.tp_size);
    const GradTargets& g = c.grads;
    if (vocab_rows()) {
      // logits = h·wᵀ: dw += dlogitsᵀ·h.
      gemm(l, true, false, cols, d_, n, 1.0f, c.dlogits.get(), cols, c.h.operand(), d_, 1.0f, g[w_],
           d_, name_);
    } else {
      // logits = h·w: dw += hᵀ·dlogits.
      gemm(l, true, false, d_, cols, n, 1.0f, c.h.operand(), d_, c.dlogits.get(), cols, 1.0f, g[w_],
           cols, name_);
    }
    add_into(g[0], c.dg.get(), d_, l.stream);
    if (norm_ == Norm::layer) add_into(g[1], c.db.get(), d_, l.stream);
    c.grads.finish(l, name_);
    finish_call(l, name_);
  }

 private:
  // The group of a backward call (`call`), which must be the forward's.
  [[nodiscard]] TpGroup backward_group(const TokenHeadContext& c, const char* call) const {
    TpGroup tp = TpGroup::for_backward(c.tp(), host_.raw(), name_, c.tp_size, call);
    tp.require_sequence(c.rows != c.batch * c.local_seq, call);
    return tp;
  }
  [[nodiscard]] BlockRows block_rows(const TpGroup& group, TokenHeadContext& c, Lane& l) const {
    return {group, c.batch, c.seq, c.local_seq, d_, c.partial, c.exchange, l, name_};
  }
  // gpt's w is [vocab, d], llama's [d, vocab]: a rank's shard of `cols`
  // of the vocabulary is [cols, d] or [d, cols].
  [[nodiscard]] bool vocab_rows() const noexcept { return norm_ == Norm::layer; }
  [[nodiscard]] int64_t w_stride(int64_t cols) const noexcept { return vocab_rows() ? d_ : cols; }
  int64_t vocab_;
  int64_t d_;
  Norm norm_;
  float eps_;      // RMSNorm's (LayerNorm's is the kernel's 1e-5)
  std::size_t w_;  // the index of w among the parameters
};

}  // namespace

std::unique_ptr<Unit> make_gpt_embedding(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                         int64_t vocab, int64_t d, int64_t seq_len) {
  return std::make_unique<CudaEmbedding>(host, std::move(twin), vocab, d, seq_len, true);
}

std::unique_ptr<Unit> make_llama_embedding(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                           int64_t vocab, int64_t d, int64_t seq_len) {
  return std::make_unique<CudaEmbedding>(host, std::move(twin), vocab, d, seq_len, false);
}

std::unique_ptr<Unit> make_gpt_block(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                     int64_t d, int64_t heads, int64_t hidden) {
  return std::make_unique<CudaGptBlock>(host, std::move(twin), d, heads, hidden);
}

std::unique_ptr<Unit> make_gpt_head(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                    int64_t vocab, int64_t d) {
  return std::make_unique<CudaHead>(host, std::move(twin), vocab, d, CudaHead::Norm::layer, 0.0f);
}

std::unique_ptr<Unit> make_llama_head(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                      int64_t vocab, int64_t d, double norm_eps) {
  return std::make_unique<CudaHead>(host, std::move(twin), vocab, d, CudaHead::Norm::rms,
                                    static_cast<float>(norm_eps));
}

}  // namespace tessera::model::cuda

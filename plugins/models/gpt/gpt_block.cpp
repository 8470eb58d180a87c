// The gpt's pre-LN decoder block (see gpt.hpp): LayerNorm, causal
// multi-head attention computed per (batch, head) with GEMMs, residual,
// LayerNorm, GELU MLP, residual; and the hand-written backward pass.
#include <cmath>
#include <utility>

#include "gpt.hpp"
#include "tessera/models/gpt_params.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/tensor_parallel.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {
namespace {

using enum gpt_block::Param;

struct BlockContext final : UnitContext {
  int64_t batch = -1;
  int64_t seq = 0;
  int64_t local_seq = 0;         // positions per example this rank holds (seq/tp in sequence mode)
  int64_t first_pos = 0;         // the first of them
  int32_t tp_size = 1;           // tensor-parallel group of the forward
  bool input_grad_done = false;  // backward_input ran; backward_weight may follow
  // Saved by forward. Under sequence parallelism x, the statistics, x2 and
  // y cover this rank's rows only; h1 and h2 are gathered whole. u holds
  // gelu'() of the MLP's pre-activation (what the backward needs of it).
  std::vector<float> x, mean1, rstd1, h1, qkv, probs, attn, x2, mean2, rstd2, h2, u, act, y;
  // Kept by backward_input for backward_weight: each linear's output
  // gradient (proj: dy, fc: du, attention projection: dx2, qkv: dqkv) and
  // the LayerNorm gain and bias gradients, summed over the rows.
  std::vector<float> dy, du, dx2, dqkv, dln1_g, dln1_b, dln2_g, dln2_b;
  // Scratch of backward_input.
  std::vector<float> dact, dh, da, dscores, dx;
  [[nodiscard]] std::size_t bytes() const noexcept override {
    std::size_t total = 0;
    for (const auto* b :
         {&x,      &mean1,  &rstd1,  &h1,     &qkv,  &probs, &attn, &x2,      &mean2,
          &rstd2,  &h2,     &u,      &act,    &y,    &dy,    &du,   &dx2,     &dqkv,
          &dln1_g, &dln1_b, &dln2_g, &dln2_b, &dact, &dh,    &da,   &dscores, &dx}) {
      total += b->capacity() * sizeof(float);
    }
    return total;
  }
};

// A buffer every element of which is written before it is read: resized
// only (no pass over it when its size is unchanged since the last step).
void sized(std::vector<float>& v, int64_t count) { v.resize(static_cast<std::size_t>(count)); }

// A buffer that is accumulated into: resized and set to zero.
void zeroed(std::vector<float>& v, int64_t count) {
  v.assign(static_cast<std::size_t>(count), 0.0f);
}

// y = residual + x·w + bias for a row-parallel w over the whole rows (bsz
// examples): without a group the linear with its residual; with one,
// row_parallel_product to the `local_seq` positions per example this rank
// holds, then the replicated bias and this rank's rows of the residual
// added to those rows.
void row_parallel_forward(const TpGroup& tp, const float* x, const float* w, const float* bias,
                          const float* residual, int64_t bsz, int64_t seq, int64_t local_seq,
                          int64_t in, int64_t out, float* y, const char* what) {
  if (!tp.active()) {
    kernels::linear_forward_residual(x, w, bias, residual, bsz * seq, in, out, y);
    return;
  }
  row_parallel_product(tp, x, w, bsz, local_seq, in, out, y, what);
  for (int64_t r = 0; r < bsz * local_seq; ++r) kernels::add_into(y + r * out, bias, out);
  kernels::add_into(y, residual, bsz * local_seq * out);
}

// LayerNorm of this rank's rows of x into `whole` (all rows).
void layernorm_to_whole(const TpGroup& tp, const float* x, const float* g, const float* b,
                        int64_t bsz, int64_t local_seq, int64_t d, float* whole, float* mean,
                        float* rstd, const char* what) {
  norm_rows_to_whole(tp, bsz, local_seq, d, whole, what, [&](float* h) {
    kernels::layernorm_forward(x, g, b, bsz * local_seq, d, h, mean, rstd);
  });
}

// Adds the column sums of this rank's rows of `whole` [bsz · seq, width]
// (positions [first, first + local_seq) of each example) into dst: a
// replicated bias's gradient, this rank's part under sequence parallelism.
void add_row_sums(const float* whole, int64_t bsz, int64_t seq, int64_t first, int64_t local_seq,
                  int64_t width, float* dst) {
  for (int64_t b = 0; b < bsz; ++b) {
    for (int64_t t = first; t < first + local_seq; ++t) {
      kernels::add_into(dst, whole + (b * seq + t) * width, width);
    }
  }
}

// The group of a backward call, which must have the forward's size.
TpGroup backward_group(const BlockContext& c, const std::string& unit) {
  TpGroup tp = TpGroup::for_backward(c.tp(), c.host(), unit, c.tp_size, "backward");
  tp.require_sequence(c.local_seq != c.seq, "backward");
  return tp;
}

}  // namespace

GptBlock::GptBlock(std::string name, int64_t d_model, int64_t heads, int64_t mlp_ratio,
                   int64_t seq_len)
    : ConventionUnit(std::move(name), false, false),
      d_(d_model),
      heads_(heads),
      hidden_(mlp_ratio * d_model),
      seq_len_(seq_len > 0 ? seq_len : 1) {
  TESSERA_CHECK(heads > 0 && d_model % heads == 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': heads ", heads, " must divide d_model ", d_model);
  const int64_t d = d_model;
  specs_ = {
      {"ln1_g", {d}, SplitHint::none, {}},
      {"ln1_b", {d}, SplitHint::none, {}},
      {"attn_qkv_w", {d, 3 * d}, SplitHint::column, {}, 3},  // q | k | v, each split alike
      {"attn_qkv_b", {3 * d}, SplitHint::column, {}, 3},
      {"attn_proj_w", {d, d}, SplitHint::row, {}},
      {"attn_proj_b", {d}, SplitHint::none, {}},
      {"ln2_g", {d}, SplitHint::none, {}},
      {"ln2_b", {d}, SplitHint::none, {}},
      {"fc_w", {d, hidden_}, SplitHint::column, {}},
      {"fc_b", {hidden_}, SplitHint::column, {}},
      {"proj_w", {hidden_, d}, SplitHint::row, {}},
      {"proj_b", {d}, SplitHint::none, {}},
  };
}

UnitCost GptBlock::cost() const {
  // Per token: the four GEMMs (qkv, projection, fc, proj) and attention
  // against all T positions (q·kᵀ and probs·v); backward twice the forward.
  const auto d = static_cast<double>(d_);
  const auto t = static_cast<double>(seq_len_);
  const auto h = static_cast<double>(hidden_);
  const double per_token = 2.0 * d * (3.0 * d) + 2.0 * d * d + 4.0 * d * h + 4.0 * t * d;
  UnitCost c;
  c.forward_flops = t * per_token;
  c.backward_flops = 2.0 * c.forward_flops;
  // The context after forward and backward, per example: split over a
  // tensor group, q|k|v, attention output, fc and gelu outputs, the
  // probabilities per head, and their gradients (dqkv, da, du, dact);
  // split in sequence mode, the input, residual sum, output and input
  // gradient [T, d] and both LayerNorms' mean and rstd; whole, both
  // LayerNorm outputs and the output gradient, its copy at the attention
  // projection and ln's input gradient. (Not per example: the LayerNorm
  // gain and bias gradients, 4·d, and the scores' gradient scratch, T².)
  const double split = t * (8.0 * d + 4.0 * h) + static_cast<double>(heads_) * t * t;
  set_activations(c, split, t * (4.0 * d + 4.0), t * 5.0 * d, t * d);
  return c;
}

std::unique_ptr<UnitContext> GptBlock::make_context() const {
  return std::make_unique<BlockContext>();
}

void GptBlock::check_tensor_parallel(int32_t size, uint32_t flags) const {
  // heads/tp heads per rank; d_model and the MLP's r·d_model then split too.
  const TpGroup tp = TpGroup::for_check(size, flags, name_);
  tp.require_divisible("heads", heads_);  // the embedding checks seq_len
}

ConstView GptBlock::forward(UnitContext& ctx_base, std::span<const float* const> p,
                            const UnitInput& input) const {
  kernels::check_count(name_, "parameter", p.size(), kParamCount);
  auto& c = dynamic_cast<BlockContext&>(ctx_base);
  TESSERA_CHECK(input.batch != nullptr && input.batch->is_sequence(), TESSERA_ERR_INVALID_ARGUMENT,
                "unit '", name_, "': needs a sequence batch");
  const int64_t bsz = input.batch->size;
  const int64_t seq = input.batch->seq_len;
  const int64_t n = bsz * seq;
  const int64_t d = d_;
  // Under tensor parallelism this rank holds heads/tp heads: dl columns of
  // each of q, k and v, the matching dl rows of the attention projection,
  // hidden/tp columns of fc and rows of proj. The row-parallel products are
  // partial sums, added up over the group before their (replicated) bias.
  // Under sequence parallelism x, the LayerNorms and residuals cover this
  // rank's seq/tp positions of each example (nl rows): the LayerNorm
  // outputs are gathered whole before q|k|v and fc, and the row-parallel
  // sums reduce-scattered back to this rank's rows.
  const TpGroup tp(input.tp, ctx_base.host(), name_);
  tp.require_divisible("heads", heads_);
  const int64_t local_seq = tp.local_positions("the batch's seq_len", seq);
  const int64_t nl = bsz * local_seq;
  TESSERA_CHECK(!input.x.empty() && input.x.rows == nl && input.x.cols == d,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': input is ", input.x.rows, "x",
                input.x.cols, ", expected ", nl, "x", d);
  const int64_t heads = heads_ / tp.size();
  const int64_t dl = d / tp.size();
  const int64_t hidden = hidden_ / tp.size();
  c.batch = bsz;
  c.seq = seq;
  c.local_seq = local_seq;
  c.first_pos = tp.first_position(local_seq);
  c.tp_size = tp.size();
  c.input_grad_done = false;
  c.x.assign(input.x.data, input.x.data + nl * d);
  sized(c.mean1, nl);
  sized(c.rstd1, nl);
  sized(c.h1, n * d);
  layernorm_to_whole(tp, c.x.data(), p[kLn1G], p[kLn1B], bsz, local_seq, d, c.h1.data(),
                     c.mean1.data(), c.rstd1.data(), "the first LayerNorm's output");
  sized(c.qkv, n * 3 * dl);
  kernels::linear_forward(c.h1.data(), p[kQkvW], p[kQkvB], n, d, 3 * dl, c.qkv.data());

  // Attention per (batch, head): probs = causal softmax(q kᵀ · scale), out = probs v.
  const int64_t dh = d / heads_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  sized(c.probs, bsz * heads * seq * seq);
  zeroed(c.attn, n * dl);  // one clearing pass for every head's product below
  for (int64_t b = 0; b < bsz; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* q = c.qkv.data() + b * seq * 3 * dl + h * dh;
      const float* k = q + dl;
      const float* v = q + 2 * dl;
      float* pr = c.probs.data() + (b * heads + h) * seq * seq;
      kernels::gemm_overwrite(false, true, seq, seq, dh, scale, q, 3 * dl, k, 3 * dl, pr, seq);
      kernels::causal_softmax_forward(pr, seq);
      kernels::gemm(false, false, seq, dh, seq, 1.0f, pr, seq, v, 3 * dl, 1.0f,
                    c.attn.data() + b * seq * dl + h * dh, dl);
    }
  }
  // Residual around the attention projection.
  sized(c.x2, nl * d);
  row_parallel_forward(tp, c.attn.data(), p[kAttnProjW], p[kAttnProjB], c.x.data(), bsz, seq,
                       local_seq, dl, d, c.x2.data(), "the attention projection's output");
  // MLP with its residual.
  sized(c.mean2, nl);
  sized(c.rstd2, nl);
  sized(c.h2, n * d);
  layernorm_to_whole(tp, c.x2.data(), p[kLn2G], p[kLn2B], bsz, local_seq, d, c.h2.data(),
                     c.mean2.data(), c.rstd2.data(), "the second LayerNorm's output");
  sized(c.u, n * hidden);
  sized(c.act, n * hidden);
  kernels::linear_forward(c.h2.data(), p[kFcW], p[kFcB], n, d, hidden, c.u.data());
  kernels::gelu_forward_keep_derivative(c.u.data(), n * hidden, c.act.data());
  sized(c.y, nl * d);
  row_parallel_forward(tp, c.act.data(), p[kProjW], p[kProjB], c.x2.data(), bsz, seq, local_seq,
                       hidden, d, c.y.data(), "the MLP's output");
  return {c.y.data(), nl, d};
}

ConstView GptBlock::backward_input(UnitContext& ctx_base, std::span<const float* const> p,
                                   ConstView grad_output) const {
  kernels::check_count(name_, "parameter", p.size(), kParamCount);
  auto& c = dynamic_cast<BlockContext&>(ctx_base);
  TESSERA_CHECK(c.batch >= 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward without a forward on this context");
  const int64_t bsz = c.batch;
  const int64_t seq = c.seq;
  const int64_t n = bsz * seq;
  const int64_t local_seq = c.local_seq;
  const int64_t nl = bsz * local_seq;
  const int64_t d = d_;
  TESSERA_CHECK(!grad_output.empty() && grad_output.rows == nl && grad_output.cols == d,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': output gradient is ",
                grad_output.rows, "x", grad_output.cols, ", expected ", nl, "x", d);
  const TpGroup tp = backward_group(c, name_);
  const int64_t heads = heads_ / tp.size();
  const int64_t dl = d / tp.size();
  const int64_t hidden = hidden_ / tp.size();
  // The output gradient belongs to the caller: the weight half reads a copy
  // (gathered whole under sequence parallelism: proj's input gradient and
  // weight gradient need every row).
  sized(c.dy, n * d);
  tp.rows_to_whole(grad_output.data, bsz, local_seq, d, c.dy.data(), "the block's output gradient");
  // This rank's rows of ln2's and ln1's output gradients: c.dh itself, or a
  // local buffer for the reduce-scatter under sequence parallelism.
  std::vector<float> dh_local;
  float* dh_rows = nullptr;

  // MLP branch: y = x2 + proj(gelu(fc(ln2(x2)))).
  sized(c.dact, n * hidden);
  kernels::linear_backward_input(p[kProjW], c.dy.data(), n, hidden, d, c.dact.data());
  sized(c.du, n * hidden);
  kernels::multiply(c.dact.data(), c.u.data(), n * hidden, c.du.data());  // dact · gelu'()
  sized(c.dh, n * d);
  dh_rows = c.dh.data();
  if (tp.sequence()) {
    dh_local.resize(static_cast<std::size_t>(nl * d));
    dh_rows = dh_local.data();
  }
  kernels::linear_backward_input(p[kFcW], c.du.data(), n, d, hidden, c.dh.data());
  // fc is column-parallel: each rank has its columns' part of ln2's output
  // gradient.
  tp.partial_to_rows(c.dh.data(), bsz, local_seq, d, dh_rows, "the MLP's input gradient");
  // dx collects this rank's rows of the input gradient: first the residual
  // path and ln2's part (that is dx2's rows), then ln1's part.
  c.dx.assign(grad_output.data, grad_output.data + nl * d);
  zeroed(c.dln2_g, d);
  zeroed(c.dln2_b, d);
  kernels::layernorm_backward(c.x2.data(), p[kLn2G], c.mean2.data(), c.rstd2.data(), dh_rows, nl, d,
                              c.dx.data(), c.dln2_g.data(), c.dln2_b.data());
  sized(c.dx2, n * d);
  tp.rows_to_whole(c.dx.data(), bsz, local_seq, d, c.dx2.data(),
                   "the attention projection's output gradient");

  // Attention branch: x2 = x + proj(attn(qkv(ln1(x)))).
  sized(c.da, n * dl);
  kernels::linear_backward_input(p[kAttnProjW], c.dx2.data(), n, dl, d, c.da.data());
  const int64_t dh = d / heads_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  zeroed(c.dqkv, n * 3 * dl);  // one clearing pass for the products into dq, dk, dv below
  sized(c.dscores, seq * seq);
  for (int64_t b = 0; b < bsz; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t off = b * seq * 3 * dl + h * dh;
      const float* q = c.qkv.data() + off;
      const float* k = q + dl;
      const float* v = q + 2 * dl;
      float* dq = c.dqkv.data() + off;
      float* dk = dq + dl;
      float* dv = dq + 2 * dl;
      const float* pr = c.probs.data() + (b * heads + h) * seq * seq;
      const float* dout = c.da.data() + b * seq * dl + h * dh;
      float* ds = c.dscores.data();
      // dprobs = dout vᵀ ; dv = probsᵀ dout.
      kernels::gemm_overwrite(false, true, seq, seq, dh, 1.0f, dout, dl, v, 3 * dl, ds, seq);
      kernels::gemm(true, false, seq, dh, seq, 1.0f, pr, seq, dout, dl, 1.0f, dv, 3 * dl);
      // Softmax backward row by row: ds = p ⊙ (dp − Σ dp⊙p); masked entries have p = 0.
      kernels::causal_softmax_backward(pr, seq, ds);
      // scores = scale q kᵀ: dq = scale ds k ; dk = scale dsᵀ q.
      kernels::gemm(false, false, seq, dh, seq, scale, ds, seq, k, 3 * dl, 1.0f, dq, 3 * dl);
      kernels::gemm(true, false, seq, dh, seq, scale, ds, seq, q, 3 * dl, 1.0f, dk, 3 * dl);
    }
  }
  kernels::linear_backward_input(p[kQkvW], c.dqkv.data(), n, d, 3 * dl, c.dh.data());
  // q|k|v is column-parallel: sum the parts of ln1's output gradient.
  tp.partial_to_rows(c.dh.data(), bsz, local_seq, d, dh_rows, "the attention's input gradient");
  zeroed(c.dln1_g, d);
  zeroed(c.dln1_b, d);
  kernels::layernorm_backward(c.x.data(), p[kLn1G], c.mean1.data(), c.rstd1.data(), dh_rows, nl, d,
                              c.dx.data(), c.dln1_g.data(), c.dln1_b.data());
  c.input_grad_done = true;
  return {c.dx.data(), nl, d};
}

void GptBlock::backward_weight(UnitContext& ctx_base, std::span<const float* const> p,
                               std::span<float* const> g) const {
  kernels::check_count(name_, "parameter", p.size(), kParamCount);
  kernels::check_count(name_, "gradient", g.size(), kParamCount);
  auto& c = dynamic_cast<BlockContext&>(ctx_base);
  TESSERA_CHECK(c.input_grad_done, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward_weight without backward_input on this context");
  (void)backward_group(c, name_);
  const int64_t n = c.batch * c.seq;
  const int64_t d = d_;
  // Local to each rank: the shards' gradients from this rank's activations.
  // In tensor mode the replicated LayerNorm parameters and row-parallel
  // biases get the same whole gradient on every rank of the group (their
  // inputs and output gradients are replicated), so nothing is summed over
  // it; under sequence parallelism they get their rows' part (the LayerNorm
  // sums over this rank's rows, the biases' over its rows of dy and dx2),
  // which the caller sums over the group.
  const int64_t dl = d / c.tp_size;
  const int64_t hidden = hidden_ / c.tp_size;
  const bool rows_only = c.local_seq != c.seq;
  const auto row_parallel_weight = [&](const float* x, const float* dz, int64_t in, float* dw,
                                       float* db) {
    kernels::linear_backward_weight(x, dz, n, in, d, dw, rows_only ? nullptr : db);
    if (rows_only) add_row_sums(dz, c.batch, c.seq, c.first_pos, c.local_seq, d, db);
  };
  row_parallel_weight(c.act.data(), c.dy.data(), hidden, g[kProjW], g[kProjB]);
  kernels::linear_backward_weight(c.h2.data(), c.du.data(), n, d, hidden, g[kFcW], g[kFcB]);
  kernels::add_into(g[kLn2G], c.dln2_g.data(), d);
  kernels::add_into(g[kLn2B], c.dln2_b.data(), d);
  row_parallel_weight(c.attn.data(), c.dx2.data(), dl, g[kAttnProjW], g[kAttnProjB]);
  kernels::linear_backward_weight(c.h1.data(), c.dqkv.data(), n, d, 3 * dl, g[kQkvW], g[kQkvB]);
  kernels::add_into(g[kLn1G], c.dln1_g.data(), d);
  kernels::add_into(g[kLn1B], c.dln1_b.data(), d);
  c.input_grad_done = false;
}

ConstView GptBlock::backward(UnitContext& ctx_base, std::span<const float* const> p,
                             std::span<float* const> g, ConstView grad_output) const {
  // The two halves in order; the weight half does not touch dx.
  kernels::check_count(name_, "gradient", g.size(), kParamCount);
  const ConstView grad_input = backward_input(ctx_base, p, grad_output);
  backward_weight(ctx_base, p, g);
  return grad_input;
}

}  // namespace tessera::model

// The llama's pre-RMSNorm decoder block (see llama.hpp): RMSNorm, causal
// self-attention with rotary position embeddings and grouped key/value
// heads computed per (batch, head) with GEMMs, residual, RMSNorm, SwiGLU
// MLP, residual; and the hand-written backward pass.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "llama.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/llama_params.hpp"
#include "tessera/models/tensor_parallel.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {
namespace {

using enum llama_block::Param;

struct LlamaBlockContext final : UnitContext {
  int64_t batch = -1;
  int64_t seq = 0;
  int64_t seq_local = 0;  // this rank's positions: seq / tp_size with sequence parallelism
  int32_t tp_size = 1;    // tensor-parallel group of the forward
  int32_t tp_rank = 0;
  bool sequence = false;         // the forward ran with sequence parallelism
  bool input_grad_done = false;  // backward_input ran; backward_weight may follow
  // Saved by forward (q and k after the rotation). With sequence
  // parallelism x, rstd1, x2, rstd2 and y hold this rank's rows only; h1,
  // h2 and what the column products give are whole rows.
  std::vector<float> x, rstd1, h1, q, k, v, probs, attn, x2, rstd2, h2, gate, up, act, y;
  // Kept by backward_input for backward_weight: each projection's output
  // gradient (w_down: dy, w_gate: dgate, w_up: dup, wo: dx2, wq, wk, wv: dq,
  // dk rotated back, dv) and the RMSNorm gain gradients, summed over the rows.
  std::vector<float> dy, dgate, dup, dx2, dq, dk, dv, dnorm1_g, dnorm2_g;
  // Scratch of backward_input.
  std::vector<float> dact, dh, da, dscores, dx;
  [[nodiscard]] std::size_t bytes() const noexcept override {
    std::size_t total = 0;
    for (const auto* b :
         {&x,  &rstd1, &h1,       &q,        &k,    &v,  &probs, &attn,    &x2,  &rstd2,
          &h2, &gate,  &up,       &act,      &y,    &dy, &dgate, &dup,     &dx2, &dq,
          &dk, &dv,    &dnorm1_g, &dnorm2_g, &dact, &dh, &da,    &dscores, &dx}) {
      total += b->capacity() * sizeof(float);
    }
    return total;
  }
};

void llama_sized(std::vector<float>& v, int64_t count) {
  v.assign(static_cast<std::size_t>(count), 0.0f);
}

// What one rank of a tensor-parallel group holds of a block: `heads` query
// heads (from global head `q_first`), `kv` key/value heads (from `kv_first`;
// all of them when replicated), ffn/tp columns of gate and up and rows of
// down. Query head j reads key/value head (q_first + j) / group − kv_first.
struct LlamaShard {
  int64_t heads = 0;
  int64_t q_first = 0;
  int64_t kv = 0;
  int64_t kv_first = 0;
  int64_t ffn = 0;
};

LlamaShard llama_shard(int64_t heads, int64_t kv_heads, int64_t ffn, bool kv_replicated,
                       int32_t rank, int32_t size) {
  LlamaShard s;
  s.heads = heads / size;
  s.q_first = s.heads * rank;
  s.kv = kv_replicated ? kv_heads : kv_heads / size;
  s.kv_first = kv_replicated ? 0 : s.kv * rank;
  s.ffn = ffn / size;
  return s;
}

// h = rmsnorm(x)·g of this rank's `local` rows of x (rstd: theirs), into
// the whole rows `h` (see norm_rows_to_whole).
void llama_norm_gathered(const TpGroup& tp, const float* x, const float* g, int64_t local,
                         int64_t d, float eps, float* h, float* rstd, int64_t examples,
                         int64_t seq_local, const char* what) {
  norm_rows_to_whole(tp, examples, seq_local, d, h, what,
                     [&](float* out) { kernels::rmsnorm_forward(x, g, local, d, eps, out, rstd); });
}

// The group of a backward call, which must have the forward's size, rank
// and sequence parallelism.
TpGroup llama_backward_group(const LlamaBlockContext& c, const std::string& unit,
                             std::string_view call) {
  TpGroup tp(c.tp(), c.host(), unit);
  TESSERA_CHECK(tp.size() == c.tp_size && tp.rank() == c.tp_rank, TESSERA_ERR_INVALID_ARGUMENT,
                "unit '", unit, "': backward as rank ", tp.rank(),
                " of a tensor-parallel group of ", tp.size(), " after a forward as rank ",
                c.tp_rank, " of ", c.tp_size);
  tp.require_sequence(c.sequence, call);
  return tp;
}

// The sizes a group must divide: heads and ffn, and kv_heads unless the
// key/value heads are replicated.
void require_block_splits(const TpGroup& tp, const std::string& unit, int64_t heads, int64_t ffn,
                          int64_t kv_heads, bool kv_replicated) {
  tp.require_divisible("heads", heads);
  tp.require_divisible("ffn", ffn);
  if (!kv_replicated && kv_heads % tp.size() != 0) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("unit '", unit, "': key 'kv_heads' (", kv_heads,
                               ") is not divisible by the tensor-parallel group size ", tp.size(),
                               "; key 'kv_replicated' = true keeps the key/value heads whole on "
                               "every rank"));
  }
}

}  // namespace

LlamaBlock::LlamaBlock(std::string name, const LlamaConfig& config)
    : ConventionUnit(std::move(name), false, false),
      d_(config.d_model),
      heads_(config.heads),
      kv_heads_(config.kv_heads),
      head_dim_(config.heads > 0 ? config.d_model / config.heads : 0),
      ffn_(config.ffn),
      seq_len_(config.seq_len),
      eps_(static_cast<float>(config.norm_eps)),
      kv_replicated_(config.kv_replicated) {
  TESSERA_CHECK(heads_ > 0 && d_ % heads_ == 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': heads ", heads_, " must divide d_model ", d_);
  TESSERA_CHECK(head_dim_ % 2 == 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': head dimension ", head_dim_, " must be even for rotary embeddings");
  TESSERA_CHECK(kv_heads_ > 0 && heads_ % kv_heads_ == 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '",
                name_, "': kv_heads ", kv_heads_, " must divide heads ", heads_);
  TESSERA_CHECK(ffn_ > 0 && seq_len_ > 0 && config.rope_theta > 0.0 && eps_ > 0.0f,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': ffn, seq_len, rope_theta and norm_eps must be positive");
  const int64_t d = d_;
  const int64_t kv = kv_heads_ * head_dim_;
  // With kv_replicated every rank of a tensor-parallel group holds all
  // key/value heads (for kv_heads the group size does not divide).
  const SplitHint kv_split = kv_replicated_ ? SplitHint::none : SplitHint::column;
  specs_ = {
      {"attn_norm_g", {d}, SplitHint::none, {}},
      {"wq", {d, d}, SplitHint::column, {}},
      {"wk", {d, kv}, kv_split, {}},
      {"wv", {d, kv}, kv_split, {}},
      {"wo", {d, d}, SplitHint::row, {}},
      {"mlp_norm_g", {d}, SplitHint::none, {}},
      {"w_gate", {d, ffn_}, SplitHint::column, {}},
      {"w_up", {d, ffn_}, SplitHint::column, {}},
      {"w_down", {ffn_, d}, SplitHint::row, {}},
  };
  cos_.resize(static_cast<std::size_t>(seq_len_ * head_dim_ / 2));
  sin_.resize(cos_.size());
  kernels::rope_tables(seq_len_, head_dim_, config.rope_theta, cos_.data(), sin_.data());
}

UnitCost LlamaBlock::cost() const {
  // Per token: q and o (d×d), k and v (d×kv), gate, up and down (d×ffn),
  // RoPE, and attention against all T positions; backward twice the forward.
  const auto d = static_cast<double>(d_);
  const auto kv = static_cast<double>(kv_heads_ * head_dim_);
  const auto f = static_cast<double>(ffn_);
  const auto t = static_cast<double>(seq_len_);
  const double per_token = 4.0 * d * d + 4.0 * d * kv + 6.0 * d * f + 4.0 * t * d + 3.0 * d;
  UnitCost c;
  c.forward_flops = t * per_token;
  c.backward_flops = 2.0 * c.forward_flops;
  // The context after forward and backward, per example: split over a
  // tensor group, q, attention output, gate, up, their product, the
  // probabilities per head and the gradients dq, da, dgate, dup, dact (and
  // k, v, dk, dv unless kv_replicated keeps them whole); split in sequence
  // mode, the input, residual sum, output, the norms' input gradient and
  // the block's input gradient [T, d] and both norms' rstd; whole, both
  // norms' outputs, the output gradient and its copy at wo. (Not per
  // example: the norm gain gradients, 2·d, and the scores' scratch, T².)
  const double kv_part = 4.0 * t * kv;
  const double split = t * (4.0 * d + 6.0 * f) + static_cast<double>(heads_) * t * t +
                       (kv_replicated_ ? 0.0 : kv_part);
  set_activations(c, split, t * (5.0 * d + 2.0), t * 4.0 * d + (kv_replicated_ ? kv_part : 0.0),
                  t * d);
  return c;
}

std::unique_ptr<UnitContext> LlamaBlock::make_context() const {
  return std::make_unique<LlamaBlockContext>();
}

void LlamaBlock::check_tensor_parallel(int32_t size, uint32_t flags) const {
  // The embedding checks seq_len.
  require_block_splits(TpGroup::for_check(size, flags, name_), name_, heads_, ffn_, kv_heads_,
                       kv_replicated_);
}

ConstView LlamaBlock::forward(UnitContext& ctx_base, std::span<const float* const> p,
                              const UnitInput& input) const {
  kernels::check_count(name_, "parameter", p.size(), kParamCount);
  auto& c = dynamic_cast<LlamaBlockContext&>(ctx_base);
  TESSERA_CHECK(
      input.batch != nullptr && input.batch->is_sequence() && input.batch->seq_len <= seq_len_,
      TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
      "': needs a sequence batch with seq_len <= ", seq_len_);
  const int64_t bsz = input.batch->size;
  const int64_t seq = input.batch->seq_len;
  const int64_t n = bsz * seq;
  const int64_t d = d_;
  const int64_t hd = head_dim_;
  const int64_t group = heads_ / kv_heads_;
  // Under tensor parallelism: q, k, v column-parallel by heads (k and v
  // whole with kv_replicated), wo row-parallel; gate and up
  // column-parallel, down row-parallel. The two row-parallel products are
  // summed over the group. With sequence parallelism the input, the
  // RMSNorms and the residuals work on this rank's seq/tp positions of
  // each sequence (nl rows); each norm's output is gathered to whole rows
  // before its column products (RoPE and attention see every position) and
  // each row-parallel sum is scattered back to this rank's rows.
  const TpGroup tp(input.tp, ctx_base.host(), name_);
  const int64_t seq_l = tp.local_positions("key 'seq_len'", seq);
  const int64_t nl = bsz * seq_l;
  TESSERA_CHECK(!input.x.empty() && input.x.rows == nl && input.x.cols == d,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': input is ", input.x.rows, "x",
                input.x.cols, ", expected ", nl, "x", d);
  require_block_splits(tp, name_, heads_, ffn_, kv_heads_, kv_replicated_);
  const LlamaShard sh = llama_shard(heads_, kv_heads_, ffn_, kv_replicated_, tp.rank(), tp.size());
  const int64_t dl = sh.heads * hd;
  const int64_t kvd = sh.kv * hd;
  const int64_t ffn = sh.ffn;
  c.batch = bsz;
  c.seq = seq;
  c.seq_local = seq_l;
  c.tp_size = tp.size();
  c.tp_rank = tp.rank();
  c.sequence = tp.sequence();
  c.input_grad_done = false;
  c.x.assign(input.x.data, input.x.data + nl * d);
  llama_sized(c.rstd1, nl);
  llama_sized(c.h1, n * d);
  llama_norm_gathered(tp, c.x.data(), p[kAttnNormG], nl, d, eps_, c.h1.data(), c.rstd1.data(), bsz,
                      seq_l, "the attention's normed input");
  llama_sized(c.q, n * dl);
  llama_sized(c.k, n * kvd);
  llama_sized(c.v, n * kvd);
  kernels::linear_forward(c.h1.data(), p[kWq], nullptr, n, d, dl, c.q.data());
  kernels::linear_forward(c.h1.data(), p[kWk], nullptr, n, d, kvd, c.k.data());
  kernels::linear_forward(c.h1.data(), p[kWv], nullptr, n, d, kvd, c.v.data());
  kernels::rope_apply(c.q.data(), n, seq, sh.heads, hd, cos_.data(), sin_.data(), false);
  kernels::rope_apply(c.k.data(), n, seq, sh.kv, hd, cos_.data(), sin_.data(), false);

  // Attention per (batch, head): probs = causal softmax(q kᵀ · scale), out =
  // probs v, query head h reading key/value head h / group.
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  llama_sized(c.probs, bsz * sh.heads * seq * seq);
  llama_sized(c.attn, n * dl);
  for (int64_t b = 0; b < bsz; ++b) {
    for (int64_t h = 0; h < sh.heads; ++h) {
      const int64_t kvh = (sh.q_first + h) / group - sh.kv_first;
      const float* q = c.q.data() + b * seq * dl + h * hd;
      const float* k = c.k.data() + b * seq * kvd + kvh * hd;
      const float* v = c.v.data() + b * seq * kvd + kvh * hd;
      float* pr = c.probs.data() + (b * sh.heads + h) * seq * seq;
      kernels::gemm(false, true, seq, seq, hd, scale, q, dl, k, kvd, 0.0f, pr, seq);
      for (int64_t i = 0; i < seq; ++i) {
        float* row = pr + i * seq;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const auto inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        for (int64_t j = i + 1; j < seq; ++j) row[j] = 0.0f;
      }
      kernels::gemm(false, false, seq, hd, seq, 1.0f, pr, seq, v, kvd, 0.0f,
                    c.attn.data() + b * seq * dl + h * hd, dl);
    }
  }
  // Residual around the output projection.
  llama_sized(c.x2, nl * d);
  row_parallel_product(tp, c.attn.data(), p[kWo], bsz, seq_l, dl, d, c.x2.data(),
                       "the attention's output");
  for (int64_t i = 0; i < nl * d; ++i) c.x2[i] += c.x[i];
  // SwiGLU MLP with its residual.
  llama_sized(c.rstd2, nl);
  llama_sized(c.h2, n * d);
  llama_norm_gathered(tp, c.x2.data(), p[kMlpNormG], nl, d, eps_, c.h2.data(), c.rstd2.data(), bsz,
                      seq_l, "the MLP's normed input");
  llama_sized(c.gate, n * ffn);
  llama_sized(c.up, n * ffn);
  llama_sized(c.act, n * ffn);
  kernels::linear_forward(c.h2.data(), p[kWGate], nullptr, n, d, ffn, c.gate.data());
  kernels::linear_forward(c.h2.data(), p[kWUp], nullptr, n, d, ffn, c.up.data());
  kernels::swiglu_forward(c.gate.data(), c.up.data(), n * ffn, c.act.data());
  llama_sized(c.y, nl * d);
  row_parallel_product(tp, c.act.data(), p[kWDown], bsz, seq_l, ffn, d, c.y.data(),
                       "the MLP's output");
  for (int64_t i = 0; i < nl * d; ++i) c.y[i] += c.x2[i];
  return {c.y.data(), nl, d};
}

ConstView LlamaBlock::backward_input(UnitContext& ctx_base, std::span<const float* const> p,
                                     ConstView grad_output) const {
  kernels::check_count(name_, "parameter", p.size(), kParamCount);
  auto& c = dynamic_cast<LlamaBlockContext&>(ctx_base);
  TESSERA_CHECK(c.batch >= 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward without a forward on this context");
  const int64_t bsz = c.batch;
  const int64_t seq = c.seq;
  const int64_t n = bsz * seq;
  const int64_t seq_l = c.seq_local;
  const int64_t nl = bsz * seq_l;  // this rank's rows (n without sequence parallelism)
  const int64_t d = d_;
  const int64_t hd = head_dim_;
  const int64_t group = heads_ / kv_heads_;
  TESSERA_CHECK(!grad_output.empty() && grad_output.rows == nl && grad_output.cols == d,
                TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': output gradient is ",
                grad_output.rows, "x", grad_output.cols, ", expected ", nl, "x", d);
  const TpGroup tp = llama_backward_group(c, name_, "backward_input");
  const LlamaShard sh = llama_shard(heads_, kv_heads_, ffn_, kv_replicated_, tp.rank(), tp.size());
  const int64_t dl = sh.heads * hd;
  const int64_t kvd = sh.kv * hd;
  const int64_t ffn = sh.ffn;
  // With sequence parallelism (Megatron-SP's backward) the output
  // gradient's rows are gathered before the row-parallel products' input
  // gradients, and the column-parallel groups' partial input gradients
  // (all rows) are scattered back to this rank's rows; the norms and
  // residuals run on those.
  std::vector<float> partial;  // a column group's partial input gradient, all rows
  float* dh_all = nullptr;     // where the column groups' input gradients go
  std::vector<float> dx2_local;
  if (c.sequence) {
    llama_sized(c.dy, n * d);
    tp.gather_rows(grad_output.data, bsz, seq_l, d, c.dy.data(), "the block's output gradient");
    llama_sized(partial, n * d);
  } else {
    // The output gradient belongs to the caller: the weight half reads a copy.
    c.dy.assign(grad_output.data, grad_output.data + n * d);
  }

  // MLP branch: y = x2 + w_down(silu(w_gate(h2)) ⊙ w_up(h2)), h2 = rmsnorm(x2).
  llama_sized(c.dact, n * ffn);
  kernels::linear_backward_input(p[kWDown], c.dy.data(), n, ffn, d, c.dact.data());
  llama_sized(c.dgate, n * ffn);
  llama_sized(c.dup, n * ffn);
  kernels::swiglu_backward(c.gate.data(), c.up.data(), c.dact.data(), n * ffn, c.dgate.data(),
                           c.dup.data());
  llama_sized(c.dh, nl * d);
  dh_all = c.sequence ? partial.data() : c.dh.data();
  kernels::linear_backward_input(p[kWGate], c.dgate.data(), n, d, ffn, dh_all);
  // The up projection reads the same h2: its input gradient adds to dh.
  kernels::linear_backward_input(p[kWUp], c.dup.data(), n, d, ffn, dh_all, true);
  // gate and up are column-parallel: sum the parts of the norm's output
  // gradient.
  tp.partial_to_rows(dh_all, bsz, seq_l, d, c.dh.data(), "the MLP's input gradient");
  llama_sized(c.dnorm2_g, d);
  if (c.sequence) {
    // The residual's gradient on this rank's rows; the whole rows (for wo
    // and the weight half) gathered from every rank's.
    dx2_local.assign(grad_output.data, grad_output.data + nl * d);
    kernels::rmsnorm_backward(c.x2.data(), p[kMlpNormG], c.rstd2.data(), c.dh.data(), nl, d,
                              dx2_local.data(), c.dnorm2_g.data());
    llama_sized(c.dx2, n * d);
    tp.gather_rows(dx2_local.data(), bsz, seq_l, d, c.dx2.data(),
                   "the attention's output gradient");
  } else {
    c.dx2 = c.dy;
    kernels::rmsnorm_backward(c.x2.data(), p[kMlpNormG], c.rstd2.data(), c.dh.data(), n, d,
                              c.dx2.data(), c.dnorm2_g.data());
  }

  // Attention branch: x2 = x + wo(attn(rope(wq h1), rope(wk h1), wv h1)), h1 = rmsnorm(x).
  llama_sized(c.da, n * dl);
  kernels::linear_backward_input(p[kWo], c.dx2.data(), n, dl, d, c.da.data());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  llama_sized(c.dq, n * dl);
  llama_sized(c.dk, n * kvd);  // the heads of a group add into their shared k and v
  llama_sized(c.dv, n * kvd);
  llama_sized(c.dscores, seq * seq);
  for (int64_t b = 0; b < bsz; ++b) {
    for (int64_t h = 0; h < sh.heads; ++h) {
      const int64_t q_off = b * seq * dl + h * hd;
      const int64_t kv_off = b * seq * kvd + ((sh.q_first + h) / group - sh.kv_first) * hd;
      const float* q = c.q.data() + q_off;
      const float* k = c.k.data() + kv_off;
      const float* v = c.v.data() + kv_off;
      float* dq = c.dq.data() + q_off;
      float* dk = c.dk.data() + kv_off;
      float* dv = c.dv.data() + kv_off;
      const float* pr = c.probs.data() + (b * sh.heads + h) * seq * seq;
      const float* dout = c.da.data() + q_off;
      float* ds = c.dscores.data();
      // dprobs = dout vᵀ ; dv += probsᵀ dout.
      kernels::gemm(false, true, seq, seq, hd, 1.0f, dout, dl, v, kvd, 0.0f, ds, seq);
      kernels::gemm(true, false, seq, hd, seq, 1.0f, pr, seq, dout, dl, 1.0f, dv, kvd);
      // Softmax backward row by row: ds = p ⊙ (dp − Σ dp⊙p); masked entries have p = 0.
      for (int64_t i = 0; i < seq; ++i) {
        const float* prow = pr + i * seq;
        float* drow = ds + i * seq;
        double dot = 0.0;
        for (int64_t j = 0; j <= i; ++j) dot += static_cast<double>(drow[j]) * prow[j];
        const auto dotf = static_cast<float>(dot);
        for (int64_t j = 0; j < seq; ++j) drow[j] = prow[j] * (drow[j] - dotf);
      }
      // scores = scale q kᵀ: dq = scale ds k ; dk += scale dsᵀ q.
      kernels::gemm(false, false, seq, hd, seq, scale, ds, seq, k, kvd, 0.0f, dq, dl);
      kernels::gemm(true, false, seq, hd, seq, scale, ds, seq, q, dl, 1.0f, dk, kvd);
    }
  }
  // Back through the rotations (their transposes), then the projections.
  kernels::rope_apply(c.dq.data(), n, seq, sh.heads, hd, cos_.data(), sin_.data(), true);
  kernels::rope_apply(c.dk.data(), n, seq, sh.kv, hd, cos_.data(), sin_.data(), true);
  kernels::linear_backward_input(p[kWq], c.dq.data(), n, d, dl, dh_all);
  kernels::linear_backward_input(p[kWk], c.dk.data(), n, d, kvd, dh_all, true);
  kernels::linear_backward_input(p[kWv], c.dv.data(), n, d, kvd, dh_all, true);
  // q, k and v are column-parallel: sum the parts of the norm's output
  // gradient. With replicated key/value heads each rank's dk and dv hold
  // only its query heads' share (their sum over the group is the whole,
  // which is what dh needs too). Without sequence parallelism the weight
  // half needs the whole on every rank: sum them. With it wk and wv are
  // replicated parameters whose gradient is this rank's part, summed over
  // the group by the caller: h1 is whole on every rank, so h1ᵀ·(this
  // rank's share) summed over the group is h1ᵀ·dk, and no sum is needed.
  tp.partial_to_rows(dh_all, bsz, seq_l, d, c.dh.data(), "the attention's input gradient");
  if (kv_replicated_ && !c.sequence) {
    tp.allreduce_sum(c.dk.data(), n * kvd, "the replicated keys' gradient");
    tp.allreduce_sum(c.dv.data(), n * kvd, "the replicated values' gradient");
  }
  if (c.sequence) {
    c.dx = std::move(dx2_local);
  } else {
    c.dx = c.dx2;
  }
  llama_sized(c.dnorm1_g, d);
  kernels::rmsnorm_backward(c.x.data(), p[kAttnNormG], c.rstd1.data(), c.dh.data(), nl, d,
                            c.dx.data(), c.dnorm1_g.data());
  c.input_grad_done = true;
  return {c.dx.data(), nl, d};
}

void LlamaBlock::backward_weight(UnitContext& ctx_base, std::span<const float* const> p,
                                 std::span<float* const> g) const {
  kernels::check_count(name_, "parameter", p.size(), kParamCount);
  kernels::check_count(name_, "gradient", g.size(), kParamCount);
  auto& c = dynamic_cast<LlamaBlockContext&>(ctx_base);
  TESSERA_CHECK(c.input_grad_done, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                "': backward_weight without backward_input on this context");
  const TpGroup tp = llama_backward_group(c, name_, "backward_weight");
  const LlamaShard sh = llama_shard(heads_, kv_heads_, ffn_, kv_replicated_, tp.rank(), tp.size());
  const int64_t n = c.batch * c.seq;
  const int64_t d = d_;
  const int64_t dl = sh.heads * head_dim_;
  const int64_t kvd = sh.kv * head_dim_;
  const int64_t ffn = sh.ffn;
  // Local to each rank: the shards' gradients from this rank's activations.
  // The RMSNorm gains (and replicated wk, wv, whose dk and dv the input half
  // summed) get the same whole gradient on every rank of the group; with
  // sequence parallelism each rank's part instead (the gains from its rows,
  // wk and wv from its query heads' share), summed by the caller.
  kernels::linear_backward_weight(c.act.data(), c.dy.data(), n, ffn, d, g[kWDown], nullptr);
  kernels::linear_backward_weight(c.h2.data(), c.dgate.data(), n, d, ffn, g[kWGate], nullptr);
  kernels::linear_backward_weight(c.h2.data(), c.dup.data(), n, d, ffn, g[kWUp], nullptr);
  kernels::add_into(g[kMlpNormG], c.dnorm2_g.data(), d);
  kernels::linear_backward_weight(c.attn.data(), c.dx2.data(), n, dl, d, g[kWo], nullptr);
  kernels::linear_backward_weight(c.h1.data(), c.dq.data(), n, d, dl, g[kWq], nullptr);
  kernels::linear_backward_weight(c.h1.data(), c.dk.data(), n, d, kvd, g[kWk], nullptr);
  kernels::linear_backward_weight(c.h1.data(), c.dv.data(), n, d, kvd, g[kWv], nullptr);
  kernels::add_into(g[kAttnNormG], c.dnorm1_g.data(), d);
  c.input_grad_done = false;
}

ConstView LlamaBlock::backward(UnitContext& ctx_base, std::span<const float* const> p,
                               std::span<float* const> g, ConstView grad_output) const {
  // The two halves in order; the weight half does not touch dx.
  kernels::check_count(name_, "gradient", g.size(), kParamCount);
  const ConstView grad_input = backward_input(ctx_base, p, grad_output);
  backward_weight(ctx_base, p, g);
  return grad_input;
}

}  // namespace tessera::model

// llama's CUDA decoder block (see tessera/models/cuda_units.hpp):
// pre-RMSNorm, rotary positions on q and k, grouped-query causal attention
// fused as gpt's (no seq×seq matrix in device memory), SwiGLU MLP. The
// same arithmetic as LlamaBlock on one rank, in an order of summation of
// the device's. The embedding and the head are gpt's units with llama's
// norm and layout (gpt_units.cpp). Under a tensor-parallel group the
// block splits as LlamaBlock does: heads/tp query heads, kv_heads/tp
// key/value heads (all of them with kv_replicated, whose gradients are
// then summed over the group in tensor mode), ffn/tp columns of the gate
// and up products, the partial sums of wo and w_down summed; in sequence
// mode as gpt's block (gpt_units.cpp).
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "device_support.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/llama_params.hpp"

namespace tessera::model::cuda {
namespace {

// ---- decoder block ----

// What one rank of a tensor-parallel group of `size` holds of a block:
// `heads` query heads from the model's head `q_first`, `kv` key/value
// heads from `kv_first` (all of them when replicated), `ffn` columns of
// the gate and up products.
struct LlamaShard {
  int64_t heads;
  int64_t q_first;
  int64_t kv;
  int64_t kv_first;
  int64_t ffn;
};

struct LlamaBlockContext final : UnitContext {
  int64_t batch = -1;
  int64_t seq = 0;
  int64_t local_seq = 0;  // positions of each example this rank holds (seq/tp in sequence mode)
  int32_t tp_size = 1;    // the forward's group
  int32_t tp_rank = 0;
  bool input_grad_done = false;
  Operands params;
  GradTargets grads;
  // The rotation tables [seq_len, head_dim / 2], uploaded by the first forward.
  DeviceArray cos, sin;
  // Kept from forward for backward.
  DeviceArray x, rstd1, lse, x2, rstd2;
  // 16-bit under bf16 or f16: the products' inputs alone, the attention's
  // inputs (q and k rotated) and output, and SwiGLU's inputs.
  KeptOperand h1, h2, act, q, k, v, attn, gate, up;
  // Backward scratch, and what the input half keeps for the weight half
  // (dy, dgate, dup, dx2, dq, dk, dv and the RMSNorms' gain gradients).
  DeviceArray dy, dact, dgate, dup, dh2, dx2, dattn, delta, dq, dk, dv, dh1;
  DeviceArray dnorm1, dnorm2;
  // Sequence parallelism: this rank's rows of the output gradient and of
  // dx2, every row's partial sums before the reduce-scatter, and a norm's
  // rows before the gather.
  DeviceArray dy_rows, dx2_rows, partial, norm_rows;
  DeviceArray y{true}, dx{true};
  RowExchange rows;
  [[nodiscard]] std::size_t bytes() const noexcept override {
    std::size_t total = 0;
    for (const KeptOperand* a : {&h1, &h2, &act, &q, &k, &v, &attn, &gate, &up}) {
      total += a->bytes();
    }
    for (const DeviceArray* a :
         {&x,      &rstd1, &lse,   &x2,      &rstd2,    &dy,      &dact,     &dgate, &dup,
          &dh2,    &dx2,   &dattn, &delta,   &dq,       &dk,      &dv,       &dh1,   &dnorm1,
          &dnorm2, &y,     &dx,    &dy_rows, &dx2_rows, &partial, &norm_rows}) {
      total += a->bytes();
    }
    return total;
  }
};

class CudaLlamaBlock final : public TwinnedUnit {
  // In the class: gpt_units.cpp's parameter names share this unity file.
  using enum llama_block::Param;

 public:
  CudaLlamaBlock(const tessera_host_api* host, std::unique_ptr<Unit> twin, const LlamaShape& shape)
      : TwinnedUnit(host, std::move(twin)),
        d_(shape.d_model),
        heads_(shape.heads),
        kv_heads_(shape.kv_heads),
        hd_(shape.d_model / shape.heads),
        ffn_(shape.ffn),
        seq_len_(shape.seq_len),
        eps_(static_cast<float>(shape.norm_eps)),
        kv_replicated_(shape.kv_replicated) {
    TESSERA_CHECK(heads_ > 0 && kv_heads_ > 0 && heads_ % kv_heads_ == 0 && hd_ % 2 == 0,
                  TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_, "': kv_heads ", kv_heads_,
                  " must divide heads ", heads_, " and the head dimension ", hd_, " be even");
    cos_.resize(static_cast<std::size_t>(seq_len_ * hd_ / 2));
    sin_.resize(cos_.size());
    kernels::rope_tables(seq_len_, hd_, shape.rope_theta, cos_.data(), sin_.data());
  }

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override {
    return std::make_unique<LlamaBlockContext>();
  }

  ConstView forward(UnitContext& ctx_base, std::span<const float* const> params,
                    const UnitInput& input) const override {
    check_counts(params.size(), 0);
    require_sequences(*this, input);
    TESSERA_CHECK(input.batch->seq_len <= seq_len_, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                  "': needs a sequence batch with seq_len <= ", seq_len_);
    auto& c = dynamic_cast<LlamaBlockContext&>(ctx_base);
    // Under sequence parallelism x, the RMSNorms and the residuals cover
    // this rank's positions of each example (nl rows): the norms' outputs
    // are gathered whole before the column products, and the row-parallel
    // sums reduce-scattered back to this rank's rows.
    const TpGroup tp(input.tp, host_.raw(), name_);
    if (tp.active()) check_tensor_parallel(tp.size(), input.tp->flags);
    const int64_t local_seq = tp.local_positions("the batch's seq_len", input.batch->seq_len);
    Lane& l = lane(host_, name_);
    const int64_t nl = take_rows(*this, d_, input, c.x, l, local_seq);
    c.batch = input.batch->size;
    c.seq = input.batch->seq_len;
    c.local_seq = local_seq;
    const int64_t n = c.batch * c.seq;
    c.tp_size = tp.size();
    c.tp_rank = tp.rank();
    c.input_grad_done = false;
    const LlamaShard s = shard(c);
    const int64_t d = d_;
    const int64_t dl = s.heads * hd_;
    const int64_t kvd = s.kv * hd_;
    const int64_t ffn = s.ffn;
    const auto un = static_cast<size_t>(n);
    const auto unl = static_cast<size_t>(nl);
    upload_tables(c, l);
    c.params.bind(params, specs_, l, name_, tp.size());
    const Operands& p = c.params;
    const BlockRows rows = block_rows(tp, c, l);
    // Attention: h1 = rmsnorm(x)·g1; q, k, v; RoPE on q and k.
    float* h1 = c.h1.f32().ensure(un * d, l, name_);
    float* rstd1 = c.rstd1.ensure(unl, l, name_);
    rows.norm_to_whole(c.norm_rows, h1, "the attention norm's output", [&](float* out) {
      rmsnorm_forward(c.x.get(), p[kAttnNormG], nl, d, eps_, out, rstd1, l.stream);
    });
    float* q = c.q.f32().ensure(un * dl, l, name_);
    float* k = c.k.f32().ensure(un * kvd, l, name_);
    float* v = c.v.f32().ensure(un * kvd, l, name_);
    c.h1.keep(un * d, l, name_);
    const In h1_in = c.h1.operand();
    gemm(l, false, false, n, dl, d, 1.0f, h1_in, d, p[kWq], dl, 0.0f, q, dl, name_);
    gemm(l, false, false, n, kvd, d, 1.0f, h1_in, d, p[kWk], kvd, 0.0f, k, kvd, name_);
    gemm(l, false, false, n, kvd, d, 1.0f, h1_in, d, p[kWv], kvd, 0.0f, v, kvd, name_);
    rope_apply(q, n, c.seq, s.heads, hd_, c.cos.get(), c.sin.get(), false, l.stream);
    rope_apply(k, n, c.seq, s.kv, hd_, c.cos.get(), c.sin.get(), false, l.stream);
    c.q.keep(un * dl, l, name_);
    c.k.keep(un * kvd, l, name_);
    c.v.keep(un * kvd, l, name_);
    attention_forward(attention(c), c.attn.store(un * dl, l, name_),
                      c.lse.ensure(un * s.heads, l, name_), l.stream);
    // x2 = x + attn·wo, wo row-parallel: partial sums first.
    float* x2 = c.x2.ensure(unl * d, l, name_);
    rows.row_parallel(c.attn.operand(), p[kWo], dl, x2, "the attention projection's output",
                      nullptr, c.x.get());
    // y = x2 + (silu(h2·w_gate) ⊙ h2·w_up)·w_down, h2 = rmsnorm(x2)·g2.
    float* h2 = c.h2.f32().ensure(un * d, l, name_);
    float* rstd2 = c.rstd2.ensure(unl, l, name_);
    rows.norm_to_whole(c.norm_rows, h2, "the MLP norm's output", [&](float* out) {
      rmsnorm_forward(x2, p[kMlpNormG], nl, d, eps_, out, rstd2, l.stream);
    });
    float* gate = c.gate.f32().ensure(un * ffn, l, name_);
    float* up = c.up.f32().ensure(un * ffn, l, name_);
    c.h2.keep(un * d, l, name_);
    const In h2_in = c.h2.operand();
    float* act = c.act.f32().ensure(un * ffn, l, name_);
    gemm(l, false, false, n, ffn, d, 1.0f, h2_in, d, p[kWGate], ffn, 0.0f, gate, ffn, name_);
    gemm(l, false, false, n, ffn, d, 1.0f, h2_in, d, p[kWUp], ffn, 0.0f, up, ffn, name_);
    c.gate.keep(un * ffn, l, name_);
    c.up.keep(un * ffn, l, name_);
    swiglu_forward(c.gate.at(0), c.up.at(0), c.gate.elem(), n * ffn, act, l.stream);
    c.act.keep(un * ffn, l, name_);
    float* y = c.y.ensure(unl * d, l, name_);
    rows.row_parallel(c.act.operand(), p[kWDown], ffn, y, "the MLP's output", nullptr, x2);
    finish_call(l, name_);
    return {y, nl, d};
  }

  // Every input-gradient product; keeps the output gradient dy, dgate,
  // dup, dx2, dq, dk and dv (the products' output gradients, dq and dk
  // rotated back) and the RMSNorms' gain gradients for the weight half.
  ConstView backward_input(UnitContext& ctx_base, std::span<const float* const> params,
                           ConstView grad_output) const override {
    check_counts(params.size(), 0);
    auto& c = dynamic_cast<LlamaBlockContext&>(ctx_base);
    require_forward(c.batch >= 0);
    const TpGroup tp = backward_group(c, "backward_input");
    const LlamaShard s = shard(c);
    const int64_t d = d_;
    const int64_t dl = s.heads * hd_;
    const int64_t kvd = s.kv * hd_;
    const int64_t ffn = s.ffn;
    const int64_t n = c.batch * c.seq;
    const int64_t nl = c.batch * c.local_seq;
    const auto un = static_cast<size_t>(n);
    const auto unl = static_cast<size_t>(nl);
    Lane& l = lane(host_, name_);
    const BlockRows rows = block_rows(tp, c, l);
    // The output gradient, this rank's rows and whole (w_down's input and
    // weight gradients need every row).
    const float* dy_rows =
        kept_output_gradient(*this, grad_output, nl, d, tp.sequence() ? c.dy_rows : c.dy, l);
    float* dy = c.dy.ensure(un * d, l, name_);
    rows.to_whole(dy_rows, dy, "the block's output gradient");
    c.params.bind(params, specs_, l, name_, c.tp_size);
    const Operands& p = c.params;
    // MLP.
    float* dact = c.dact.ensure(un * ffn, l, name_);
    gemm(l, false, true, n, ffn, d, 1.0f, dy, d, p[kWDown], d, 0.0f, dact, ffn, name_);
    float* dgate = c.dgate.ensure(un * ffn, l, name_);
    float* dup = c.dup.ensure(un * ffn, l, name_);
    swiglu_backward(c.gate.at(0), c.up.at(0), c.gate.elem(), dact, n * ffn, dgate, dup, l.stream);
    // w_gate and w_up are column-parallel: each rank's part of the norm's
    // output gradient, summed into this rank's rows.
    float* dh2 = c.dh2.ensure(unl * d, l, name_);
    float* dh2_all = rows.partial_for(dh2);
    gemm(l, false, true, n, d, ffn, 1.0f, dgate, ffn, p[kWGate], ffn, 0.0f, dh2_all, d, name_);
    gemm(l, false, true, n, d, ffn, 1.0f, dup, ffn, p[kWUp], ffn, 1.0f, dh2_all, d, name_);
    rows.sum_partial(dh2_all, dh2, "the MLP's input gradient");
    // The residual's gradient plus the second RMSNorm's, on this rank's rows.
    float* dx2_rows =
        tp.sequence() ? c.dx2_rows.ensure(unl * d, l, name_) : c.dx2.ensure(un * d, l, name_);
    copy_device(dx2_rows, dy_rows, unl * d, l, name_);
    rmsnorm_backward_input(c.x2.get(), p[kMlpNormG], c.rstd2.get(), dh2, nl, d, dx2_rows, true,
                           l.stream);
    rmsnorm_backward_params(c.x2.get(), c.rstd2.get(), dh2, nl, d, zeroed(c.dnorm2, d, l, name_),
                            l.stream);
    float* dx2 = c.dx2.ensure(un * d, l, name_);
    rows.to_whole(dx2_rows, dx2, "the attention projection's output gradient");
    // Attention: x2 = x + attn·wo.
    float* dattn = c.dattn.ensure(un * dl, l, name_);
    gemm(l, false, true, n, dl, d, 1.0f, dx2, d, p[kWo], d, 0.0f, dattn, dl, name_);
    float* dq = c.dq.ensure(un * dl, l, name_);
    float* dk = c.dk.ensure(un * kvd, l, name_);
    float* dv = c.dv.ensure(un * kvd, l, name_);
    attention_backward(attention(c), c.attn.operand().data, c.lse.get(), dattn,
                       c.delta.ensure(un * s.heads, l, name_), dq, dk, dv, l.stream);
    // Back through the rotations (their transposes), then the projections.
    rope_apply(dq, n, c.seq, s.heads, hd_, c.cos.get(), c.sin.get(), true, l.stream);
    rope_apply(dk, n, c.seq, s.kv, hd_, c.cos.get(), c.sin.get(), true, l.stream);
    // q, k and v are column-parallel: each rank's part of the norm's output
    // gradient. Replicated key/value heads' dk and dv hold this rank's
    // query heads' share (the part is right from the shares). In tensor
    // mode the weight half needs their sum; under sequence parallelism wk
    // and wv get this rank's part, which the caller sums.
    float* dh1 = c.dh1.ensure(unl * d, l, name_);
    float* dh1_all = rows.partial_for(dh1);
    gemm(l, false, true, n, d, dl, 1.0f, dq, dl, p[kWq], dl, 0.0f, dh1_all, d, name_);
    gemm(l, false, true, n, d, kvd, 1.0f, dk, kvd, p[kWk], kvd, 1.0f, dh1_all, d, name_);
    gemm(l, false, true, n, d, kvd, 1.0f, dv, kvd, p[kWv], kvd, 1.0f, dh1_all, d, name_);
    rows.sum_partial(dh1_all, dh1, "the attention's input gradient");
    if (kv_replicated_ && !tp.sequence()) {
      allreduce_device(tp, dk, un * kvd, c.rows.send, l, "the replicated keys' gradient", name_);
      allreduce_device(tp, dv, un * kvd, c.rows.send, l, "the replicated values' gradient", name_);
    }
    // The input's gradient: the residual's plus the first RMSNorm's.
    float* dx = c.dx.ensure(unl * d, l, name_);
    copy_device(dx, dx2_rows, unl * d, l, name_);
    rmsnorm_backward_input(c.x.get(), p[kAttnNormG], c.rstd1.get(), dh1, nl, d, dx, true, l.stream);
    rmsnorm_backward_params(c.x.get(), c.rstd1.get(), dh1, nl, d, zeroed(c.dnorm1, d, l, name_),
                            l.stream);
    release_all({&c.x, &c.rstd1, &c.lse, &c.x2, &c.rstd2, &c.dact, &c.dh2, &c.dattn, &c.delta,
                 &c.dh1, &c.dy_rows, &c.dx2_rows, &c.partial, &c.norm_rows},
                l, name_);
    for (KeptOperand* a : {&c.q, &c.k, &c.v, &c.gate, &c.up}) a->release(l, name_);
    c.input_grad_done = true;
    finish_call(l, name_);
    return {dx, nl, d};
  }

  // The seven weight products xᵀ·dy and the RMSNorms' kept gradients.
  void backward_weight(UnitContext& ctx_base, std::span<const float* const> params,
                       std::span<float* const> grads) const override {
    check_counts(params.size(), grads.size());
    auto& c = dynamic_cast<LlamaBlockContext&>(ctx_base);
    take_input_half(c.input_grad_done);
    (void)backward_group(c, "backward_weight");
    const LlamaShard s = shard(c);
    const int64_t d = d_;
    const int64_t dl = s.heads * hd_;
    const int64_t kvd = s.kv * hd_;
    const int64_t ffn = s.ffn;
    const int64_t n = c.batch * c.seq;
    Lane& l = lane(host_, name_);
    c.grads.bind(grads, specs_, l, name_, c.tp_size);
    const GradTargets& g = c.grads;
    gemm(l, true, false, ffn, d, n, 1.0f, c.act.operand(), ffn, c.dy.get(), d, 1.0f, g[kWDown], d,
         name_);
    gemm(l, true, false, d, ffn, n, 1.0f, c.h2.operand(), d, c.dgate.get(), ffn, 1.0f, g[kWGate],
         ffn, name_);
    gemm(l, true, false, d, ffn, n, 1.0f, c.h2.operand(), d, c.dup.get(), ffn, 1.0f, g[kWUp], ffn,
         name_);
    add_into(g[kMlpNormG], c.dnorm2.get(), d, l.stream);
    gemm(l, true, false, dl, d, n, 1.0f, c.attn.operand(), dl, c.dx2.get(), d, 1.0f, g[kWo], d,
         name_);
    gemm(l, true, false, d, dl, n, 1.0f, c.h1.operand(), d, c.dq.get(), dl, 1.0f, g[kWq], dl,
         name_);
    gemm(l, true, false, d, kvd, n, 1.0f, c.h1.operand(), d, c.dk.get(), kvd, 1.0f, g[kWk], kvd,
         name_);
    gemm(l, true, false, d, kvd, n, 1.0f, c.h1.operand(), d, c.dv.get(), kvd, 1.0f, g[kWv], kvd,
         name_);
    add_into(g[kAttnNormG], c.dnorm1.get(), d, l.stream);
    c.grads.finish(l, name_);
    finish_call(l, name_);
  }

 private:
  void upload_tables(LlamaBlockContext& c, const Lane& l) const {
    if (c.cos.bytes() != 0) return;
    float* cos = c.cos.ensure(cos_.size(), l, name_);
    float* sin = c.sin.ensure(sin_.size(), l, name_);
    for (auto [to, from] : {std::pair{cos, &cos_}, std::pair{sin, &sin_}}) {
      check(cudaMemcpyAsync(to, from->data(), from->size() * sizeof(float), cudaMemcpyHostToDevice,
                            l.stream),
            name_, "cudaMemcpyAsync");
    }
  }
  // This rank's share of the block in the context's group.
  [[nodiscard]] LlamaShard shard(const LlamaBlockContext& c) const noexcept {
    const int64_t heads = heads_ / c.tp_size;
    const int64_t kv = kv_replicated_ ? kv_heads_ : kv_heads_ / c.tp_size;
    return {heads, heads * c.tp_rank, kv, kv_replicated_ ? 0 : kv * c.tp_rank, ffn_ / c.tp_size};
  }
  // The group of a backward call (`call`), which must be the forward's.
  [[nodiscard]] TpGroup backward_group(const LlamaBlockContext& c, const char* call) const {
    TpGroup tp = TpGroup::for_backward(c.tp(), host_.raw(), name_, c.tp_size, call);
    TESSERA_CHECK(tp.rank() == c.tp_rank, TESSERA_ERR_INVALID_ARGUMENT, "unit '", name_,
                  "': ", call, " as rank ", tp.rank(),
                  " of its tensor-parallel group after a forward as rank ", c.tp_rank);
    tp.require_sequence(c.local_seq != c.seq, call);
    return tp;
  }
  [[nodiscard]] BlockRows block_rows(const TpGroup& tp, LlamaBlockContext& c, Lane& l) const {
    return {tp, c.batch, c.seq, c.local_seq, d_, c.partial, c.rows, l, name_};
  }
  // This rank's q [rows, heads·hd] and k, v [rows, kv·hd] of the context,
  // as the attention kernels read them.
  [[nodiscard]] Attention attention(const LlamaBlockContext& c) const {
    const LlamaShard s = shard(c);
    Attention a{c.q.at(0),
                c.k.at(0),
                c.v.at(0),
                s.heads * hd_,
                s.kv * hd_,
                c.batch,
                c.seq,
                s.heads,
                s.kv,
                hd_,
                1.0f / std::sqrt(static_cast<float>(hd_))};
    a.group = heads_ / kv_heads_;
    a.q_first = s.q_first;
    a.kv_first = s.kv_first;
    a.elem = c.q.elem();
    return a;
  }
  int64_t d_;
  int64_t heads_;
  int64_t kv_heads_;
  int64_t hd_;
  int64_t ffn_;
  int64_t seq_len_;
  float eps_;
  bool kv_replicated_;
  std::vector<float> cos_;  // [seq_len, hd / 2], as LlamaBlock's
  std::vector<float> sin_;
};

}  // namespace

std::unique_ptr<Unit> make_llama_block(const tessera_host_api* host, std::unique_ptr<Unit> twin,
                                       const LlamaShape& shape) {
  return std::make_unique<CudaLlamaBlock>(host, std::move(twin), shape);
}

}  // namespace tessera::model::cuda

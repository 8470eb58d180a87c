// The `llama` model: token embedding (no learned positions), N pre-RMSNorm
// decoder blocks (causal self-attention with rotary position embeddings and
// optional grouped-query attention, SwiGLU MLP), a final RMSNorm and an
// untied linear head with softmax cross-entropy over the next token. No
// biases. Consumes sequence batches (int32 tokens and targets [B, T]);
// activations are [B·T, d_model] row-major.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/sdk/host.hpp"

#include "tessera/models/cuda_units.hpp"
#include "tessera/models/unit.hpp"

namespace tessera::model {

// Shape of a llama.
struct LlamaConfig {
  int64_t vocab = 0;
  int64_t layers = 0;
  int64_t d_model = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;  // key/value heads; divides heads (== heads: plain multi-head)
  int64_t seq_len = 0;
  int64_t ffn = 0;  // hidden width of the SwiGLU MLP
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  // Tensor parallelism: keep wk and wv whole on every rank of a group
  // instead of splitting them by key/value heads (for kv_heads the group
  // size does not divide).
  bool kv_replicated = false;
};

// The default SwiGLU width for `d_model`: 8·d_model/3 rounded up to a
// multiple of 8 (three matrices of about the parameter count of a 4·d GELU
// MLP's two).
int64_t llama_default_ffn(int64_t d_model) noexcept;

// Reads the options of a llama (declared in plugin.cpp): `vocab` (>= 2),
// `layers` (>= 0), `d_model`, `heads` (must divide d_model with an even
// quotient, the head dimension RoPE rotates in pairs), `kv_heads` (0:
// heads; must divide heads), `seq_len`, `ffn` (0: llama_default_ffn),
// `rope_theta` (> 0), `norm_eps` (> 0), `kv_replicated`. Throws tessera::Error (invalid
// argument) naming the key for a bad value.
LlamaConfig parse_llama_config(const sdk::Options& options);

// Token embedding: x[b,t] = wte[token[b,t]]. Param wte [vocab, d] (row:
// split by vocabulary). Reads the batch's tokens; backward returns no input
// gradient. Split backward: the input half keeps the output gradient, the
// weight half scatters it into the table. Tensor-parallel: vocab/tp rows of
// wte per rank, lookups summed over the group. Sequence-parallel
// (TESSERA_TP_SEQUENCE): every rank looks up all tokens and the sum is
// scattered, the output is this rank's seq/tp positions of each sequence;
// backward_input gathers the output gradient's rows for the weight half.
class LlamaEmbedding final : public ConventionUnit {
 public:
  LlamaEmbedding(std::string name, const LlamaConfig& config);

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override;
  [[nodiscard]] UnitCost cost() const override;
  ConstView forward(UnitContext& ctx, std::span<const float* const> params,
                    const UnitInput& input) const override;
  ConstView backward(UnitContext& ctx, std::span<const float* const> params,
                     std::span<float* const> grads, ConstView grad_output) const override;
  [[nodiscard]] uint32_t flags() const noexcept override {
    return TESSERA_UNIT_SPLIT_BACKWARD | TESSERA_UNIT_TENSOR_PARALLEL |
           TESSERA_UNIT_SEQUENCE_PARALLEL;
  }
  void check_tensor_parallel(int32_t size, uint32_t flags) const override;
  ConstView backward_input(UnitContext& ctx, std::span<const float* const> params,
                           ConstView grad_output) const override;
  void backward_weight(UnitContext& ctx, std::span<const float* const> params,
                       std::span<float* const> grads) const override;

 private:
  int64_t vocab_;
  int64_t d_;
  int64_t seq_len_;
};

// One pre-RMSNorm decoder block on [B·T, d] (T taken from the batch, at
// most seq_len):
//   h = x + attn(rmsnorm(x)·attn_norm_g) ;  y = h + mlp(rmsnorm(h)·mlp_norm_g)
// attn: q = ·wq, k = ·wk, v = ·wv; RoPE on q and k (each head's pairs
// (2i, 2i+1) rotated by t·rope_theta^(−2i/head_dim) at position t); per
// (batch, head) the causal softmax of q·kᵀ/sqrt(head_dim) times v, query
// head h reading key/value head h / (heads / kv_heads); concatenated, then
// ·wo. mlp: (silu(·w_gate) ⊙ (·w_up))·w_down.
// Params, in order: attn_norm_g [d]; wq [d, d], wk [d, kv·hd], wv [d, kv·hd]
// (column: split by heads; wk and wv none with kv_replicated); wo [d, d]
// (row); mlp_norm_g [d]; w_gate [d, ffn],
// w_up [d, ffn] (column); w_down [ffn, d] (row). hd = d / heads.
// Split backward: the input half runs every input-gradient product (dx =
// dy·wᵀ of the seven projections, attention and RoPE, RMSNorms,
// residuals), sums the RMSNorm gain gradients into the context and keeps
// each projection's output gradient; the weight half adds the seven xᵀ·dy
// and the stashed gain sums.
// Tensor-parallel: a rank holds heads/tp query heads, kv_heads/tp key/value
// heads (all of them with kv_replicated), ffn/tp columns of w_gate and w_up
// and the matching rows of wo and w_down; one allreduce after each
// row-parallel product forward, one per column-parallel group backward, and
// with kv_replicated the sums of dk and dv, all in the input half.
// Sequence-parallel (TESSERA_TP_SEQUENCE): input, output, RMSNorms and
// residuals on this rank's seq/tp positions of each sequence; each norm's
// output gathered to all rows before its column products (RoPE and
// attention see every position), each row-parallel sum scattered back to
// this rank's rows; backward gathers the output gradient and the
// attention's output gradient and scatters the two column groups' input
// gradients, in the input half. The gains' gradients are this rank's
// rows' part, and with kv_replicated wk's and wv's are its query heads'
// share (not summed inside the unit): the caller sums them over the group.
class LlamaBlock final : public ConventionUnit {
 public:
  LlamaBlock(std::string name, const LlamaConfig& config);

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override;
  [[nodiscard]] UnitCost cost() const override;
  ConstView forward(UnitContext& ctx, std::span<const float* const> params,
                    const UnitInput& input) const override;
  ConstView backward(UnitContext& ctx, std::span<const float* const> params,
                     std::span<float* const> grads, ConstView grad_output) const override;
  [[nodiscard]] uint32_t flags() const noexcept override {
    return TESSERA_UNIT_SPLIT_BACKWARD | TESSERA_UNIT_TENSOR_PARALLEL |
           TESSERA_UNIT_SEQUENCE_PARALLEL;
  }
  void check_tensor_parallel(int32_t size, uint32_t flags) const override;
  ConstView backward_input(UnitContext& ctx, std::span<const float* const> params,
                           ConstView grad_output) const override;
  void backward_weight(UnitContext& ctx, std::span<const float* const> params,
                       std::span<float* const> grads) const override;

 private:
  int64_t d_;
  int64_t heads_;
  int64_t kv_heads_;
  int64_t head_dim_;
  int64_t ffn_;
  int64_t seq_len_;
  float eps_;
  bool kv_replicated_;
  std::vector<float> cos_;  // [seq_len, head_dim / 2]
  std::vector<float> sin_;
};

// Final RMSNorm, logits = rmsnorm(x)·norm_g·w with w [d, vocab] (column:
// split by vocabulary), loss = Σ cross-entropy(logits, targets) × loss_scale
// over all B·T positions. Params: norm_g [d], w [d, vocab].
// Split backward: the input half computes the logits' gradient (kept), dx
// and the RMSNorm gain sum; the weight half adds rmsnorm(x)ᵀ·dlogits into
// `w` and the gain sum. Tensor-parallel: vocab/tp columns of w per rank and
// the cross-entropy combined over the group, as gpt's head.
// Sequence-parallel (TESSERA_TP_SEQUENCE): the input is this rank's seq/tp
// positions of each sequence; the RMSNorm runs on them and its output is
// gathered to all rows before the product; the loss is over all rows on
// every rank; the input gradient is scattered back to this rank's rows and
// the gain's gradient is their part.
class LlamaHead final : public ConventionUnit {
 public:
  LlamaHead(std::string name, const LlamaConfig& config);

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override;
  [[nodiscard]] UnitCost cost() const override;
  ConstView forward(UnitContext& ctx, std::span<const float* const> params,
                    const UnitInput& input) const override;
  ConstView backward(UnitContext& ctx, std::span<const float* const> params,
                     std::span<float* const> grads, ConstView grad_output) const override;
  [[nodiscard]] uint32_t flags() const noexcept override {
    return TESSERA_UNIT_SPLIT_BACKWARD | TESSERA_UNIT_TENSOR_PARALLEL |
           TESSERA_UNIT_SEQUENCE_PARALLEL;
  }
  void check_tensor_parallel(int32_t size, uint32_t flags) const override;
  ConstView backward_input(UnitContext& ctx, std::span<const float* const> params,
                           ConstView grad_output) const override;
  void backward_weight(UnitContext& ctx, std::span<const float* const> params,
                       std::span<float* const> grads) const override;

 private:
  int64_t vocab_;
  int64_t d_;
  int64_t seq_len_;
  float eps_;
};

// The units of a llama: "embed", "block0".."block{L-1}", "head".
std::vector<std::unique_ptr<Unit>> build_llama_units(const LlamaConfig& config);

// For a CUDA run: `units` (build_llama_units') each replaced by its CUDA
// version from `factory`, which keeps the CPU unit for its parameters,
// cost and initialisation.
std::vector<std::unique_ptr<Unit>> cuda_llama_units(const cuda::UnitFactory& factory,
                                                    const tessera_host_api* host,
                                                    const LlamaConfig& config,
                                                    std::vector<std::unique_ptr<Unit>> units);

}  // namespace tessera::model

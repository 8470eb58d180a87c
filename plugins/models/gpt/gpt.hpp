// The `gpt` reference model: token + position embedding, N pre-LayerNorm
// decoder blocks (causal multi-head attention, GELU MLP), a final LayerNorm
// and a linear head with softmax cross-entropy over the next token. Consumes
// sequence batches (int32 tokens and targets [B, T]); activations are
// [B·T, d_model] row-major.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/sdk/host.hpp"

#include "tessera/models/cuda_units.hpp"
#include "tessera/models/unit.hpp"

namespace tessera::model {

// Shape of a gpt.
struct GptConfig {
  int64_t vocab = 0;
  int64_t layers = 0;
  int64_t d_model = 0;
  int64_t heads = 0;
  int64_t seq_len = 0;
  bool tied_head = true;
  int64_t mlp_ratio = 4;
};

// Reads the options of a gpt (declared in plugin.cpp): `vocab` (>= 2),
// `layers`, `d_model`, `heads` (must divide d_model), `seq_len`,
// `tied_head`, `mlp_ratio`. Throws tessera::Error (invalid argument) naming
// the key for a bad value.
GptConfig parse_gpt_config(const sdk::Options& options);

// Token + position embedding: x[b,t] = wte[token[b,t]] + wpe[t]. Params
// wte [vocab, d] (row: split by vocabulary), wpe [seq_len, d]. Reads the
// batch's tokens; a batch may be shorter than seq_len. Backward returns no
// input gradient. Split backward: the input half keeps the output gradient,
// the weight half scatters it into the two tables. Tensor-parallel: a rank
// holds vocab/tp rows of wte, looks up zeros for the other tokens and sums
// the lookups over the group before adding wpe.
class GptEmbedding final : public ConventionUnit {
 public:
  GptEmbedding(std::string name, int64_t vocab, int64_t d_model, int64_t seq_len);

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

// One pre-LN decoder block on [B·T, d] (T taken from the batch):
//   h = x + attn(ln1(x)) ;  y = h + mlp(ln2(h))
// attn: qkv = ln1(x)·attn_qkv_w + attn_qkv_b split into heads, causal softmax
// of q·kᵀ/sqrt(d/heads) per (batch, head), times v, concatenated, then
// ·attn_proj_w + attn_proj_b. mlp: gelu(·fc_w + fc_b)·proj_w + proj_b.
// Params, in order: ln1_g, ln1_b [d]; attn_qkv_w [d, 3d] (column; the three
// d-wide blocks q, k, v each split alike), attn_qkv_b [3d] (column);
// attn_proj_w [d, d] (row), attn_proj_b [d]; ln2_g, ln2_b [d];
// fc_w [d, r·d] (column), fc_b [r·d] (column); proj_w [r·d, d] (row), proj_b [d].
// Split backward: the input half runs every input-gradient product (dx =
// dy·wᵀ of the four linears, attention, LayerNorms, residuals), sums the
// LayerNorm gain and bias gradients into the context and keeps each
// linear's output gradient; the weight half adds xᵀ·dy and the bias sums of
// the four linears and the stashed LayerNorm sums.
// Tensor-parallel: a rank holds heads/tp heads of q|k|v and the matching
// rows of attn_proj_w, r·d/tp columns of fc and rows of proj; forward sums
// each row-parallel product over the group before its bias, backward sums
// the input gradient of each column-parallel pair (both in the input half).
class GptBlock final : public ConventionUnit {
 public:
  // `seq_len` sizes the cost estimate (attention grows with it); 1 when 0.
  GptBlock(std::string name, int64_t d_model, int64_t heads, int64_t mlp_ratio,
           int64_t seq_len = 0);

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
  int64_t hidden_;
  int64_t seq_len_;
};

// Final LayerNorm, logits = ln_f(x)·wᵀ with w [vocab, d] (row: split by
// vocabulary), loss = Σ cross-entropy(logits, targets) × loss_scale over all
// B·T positions. Params: lnf_g, lnf_b [d], then `w` — or, for a tied head,
// `wte` tied to "<embedding>.wte": the caller passes the embedding's table
// and its gradient buffer, and both units' gradients add up there.
// Split backward: the input half computes the logits' gradient (kept), dx
// and the LayerNorm sums; the weight half adds dlogitsᵀ·ln_f(x) into `w`
// (the embedding's gradient when tied) and the LayerNorm sums.
// Tensor-parallel: a rank holds vocab/tp rows of w, computes only its slice
// of the logits and combines the cross-entropy over the group
// (parallel_xent_forward); backward sums dx's parts over the group.
class GptHead final : public ConventionUnit {
 public:
  // `tied_to` empty: the head owns `w`; else the qualified embedding table.
  GptHead(std::string name, int64_t vocab, int64_t d_model, std::string tied_to,
          int64_t seq_len = 0);

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

// The units of a gpt: "embed", "block0".."block{L-1}", "head".
std::vector<std::unique_ptr<Unit>> build_gpt_units(const GptConfig& config);

// For a CUDA run: `units` (build_gpt_units') each replaced by its CUDA
// version from `factory`, which keeps the CPU unit for its parameters,
// cost and initialisation.
std::vector<std::unique_ptr<Unit>> cuda_gpt_units(const cuda::UnitFactory& factory,
                                                  const tessera_host_api* host,
                                                  const GptConfig& config,
                                                  std::vector<std::unique_ptr<Unit>> units);

}  // namespace tessera::model

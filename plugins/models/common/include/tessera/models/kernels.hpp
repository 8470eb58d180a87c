// Numeric building blocks shared by the reference models: row-major GEMMs
// through OpenBLAS, dense layers, LayerNorm and RMSNorm, activations and
// SwiGLU, rotary position embeddings, softmax cross-entropy and
// deterministic initialisation. All on CPU f32, all deterministic: OpenBLAS
// is pinned to one thread on first use, so results never depend on how many
// threads it was configured with.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "tessera/models/unit.hpp"

namespace tessera::model::kernels {

// C[M,N] = alpha · op(A) · op(B) + beta · C, row-major, op = transpose when
// the flag is set; lda/ldb/ldc are row strides. Thin wrapper of cblas_sgemm.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// C[M,N] = alpha · op(A) · op(B), overwritten: gemm with beta = 0, except
// that C is cleared by a vectorised fill before a beta = 1 product rather
// than by OpenBLAS's beta pass (scalar stores on some targets). Same values.
void gemm_overwrite(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                    int64_t ldc);

// y[n,out] = x[n,in] · w[in,out] + bias[out] (bias may be null).
void linear_forward(const float* x, const float* w, const float* bias, int64_t n, int64_t in,
                    int64_t out, float* y);

// y[n,out] = residual[n,out] + bias[out] + x[n,in] · w[in,out] (y must not
// overlap residual): residual + bias written first, the product accumulated
// onto it, one pass fewer than linear_forward and add_into.
void linear_forward_residual(const float* x, const float* w, const float* bias,
                             const float* residual, int64_t n, int64_t in, int64_t out, float* y);

// Backward of linear_forward: dw += xᵀ·dy, dbias += Σrows dy (when non-null),
// dx = dy·wᵀ (overwritten; skipped when dx is null). The two halves below,
// in one call.
void linear_backward(const float* x, const float* w, const float* dy, int64_t n, int64_t in,
                     int64_t out, float* dw, float* dbias, float* dx);

// The input half of linear_backward: dx = dy·wᵀ, overwritten, or added to
// dx when `accumulate` (a second linear reading the same input).
void linear_backward_input(const float* w, const float* dy, int64_t n, int64_t in, int64_t out,
                           float* dx, bool accumulate = false);

// The weight half of linear_backward: dw += xᵀ·dy, dbias += Σrows dy (when
// non-null).
void linear_backward_weight(const float* x, const float* dy, int64_t n, int64_t in, int64_t out,
                            float* dw, float* dbias);

// dst[i] += src[i] for `count` values (a gradient computed early, added into
// the caller's buffer later).
void add_into(float* dst, const float* src, int64_t count);

// out[i] = a[i] · b[i] for `count` values (out may be a or b).
void multiply(const float* a, const float* b, int64_t count, float* out);

// LayerNorm over the last dimension with eps 1e-5: y = (x − mean)·rstd·g + b.
// Saves mean[n] and rstd[n] for the backward pass. The row sums (mean and
// variance here, the backward's two row means) are double sums in a fixed
// lane order (see kernels.cpp), so the result does not depend on
// vectorisation.
void layernorm_forward(const float* x, const float* g, const float* b, int64_t n, int64_t d,
                       float* y, float* mean, float* rstd);

// Backward of layernorm_forward: dx += gradient of x (accumulated), dg += ,
// db += .
void layernorm_backward(const float* x, const float* g, const float* mean, const float* rstd,
                        const float* dy, int64_t n, int64_t d, float* dx, float* dg, float* db);

// RMSNorm over the last dimension: y = x · rstd · g with rstd =
// 1 / sqrt(mean(x²) + eps), the mean of squares accumulated in double.
// Saves rstd[n] for the backward pass.
void rmsnorm_forward(const float* x, const float* g, int64_t n, int64_t d, float eps, float* y,
                     float* rstd);

// Backward of rmsnorm_forward: dx += gradient of x (accumulated), dg += .
// With xhat = x · rstd: dx = rstd · (dy⊙g − xhat · mean(dy⊙g⊙xhat)).
void rmsnorm_backward(const float* x, const float* g, const float* rstd, const float* dy, int64_t n,
                      int64_t d, float* dx, float* dg);

// SwiGLU gating elementwise over `count` values: y = silu(gate) · up with
// silu(z) = z · sigmoid(z).
void swiglu_forward(const float* gate, const float* up, int64_t count, float* y);

// Backward of swiglu_forward: dgate = dy · up · silu'(gate) and dup = dy ·
// silu(gate) (both overwritten), silu'(z) = s · (1 + z · (1 − s)), s =
// sigmoid(z).
void swiglu_backward(const float* gate, const float* up, const float* dy, int64_t count,
                     float* dgate, float* dup);

// Rotary position tables [seq_len, head_dim / 2]: cos[t, i] = cos(t · θ_i)
// and sin[t, i] = sin(t · θ_i) with θ_i = theta^(−2i / head_dim), computed
// in double. `head_dim` must be even.
void rope_tables(int64_t seq_len, int64_t head_dim, double theta, float* cos, float* sin);

// Rotary position embedding in place on x [rows, heads · head_dim] whose
// row r holds position r % seq (rows are whole sequences of `seq` tokens):
// in every head each pair (x[2i], x[2i+1]) is rotated by the angle t · θ_i
// of the tables (rope_tables, at least `seq` positions). `inverse` rotates
// by the opposite angle: the transpose of the rotation, hence its backward
// pass.
void rope_apply(float* x, int64_t rows, int64_t seq, int64_t heads, int64_t head_dim,
                const float* cos, const float* sin, bool inverse);

// Activation functions of the models.
enum class Activation { relu, gelu };

// y = act(z) elementwise over `count` values (gelu: the tanh approximation).
void activation_forward(Activation act, const float* z, int64_t count, float* y);

// dz = dy · act'(z) elementwise (overwritten).
void activation_backward(Activation act, const float* z, const float* dy, int64_t count, float* dz);

// GELU forward that keeps what its backward needs: y = gelu(z) and z
// overwritten by gelu'(z), from one tanh per value. The backward is then
// dz = dy · gelu'(z) (multiply), equal bit for bit to activation_backward.
void gelu_forward_keep_derivative(float* z, int64_t count, float* y);

// Causal softmax of each row of p [seq, seq] in place: row i over its
// first i + 1 entries, the rest set to 0.
void causal_softmax_forward(float* p, int64_t seq);

// Backward of causal_softmax_forward given its output p: dp = p ⊙ (dp −
// Σ_j dp⊙p) row by row, overwritten (0 where p is masked).
void causal_softmax_backward(const float* p, int64_t seq, float* dp);

// Softmax cross-entropy over rows of logits[n,c] with targets[n] in [0, c):
// writes probs[n,c] (may alias logits) and returns Σ_rows (logsumexp − logit[target]) in double
// (each row's exponentials by exp_approx, summed in float in a fixed lane order).
// Throws tessera::Error (invalid argument) naming `where` and the row when a
// target is out of range.
double softmax_xent_forward(const float* logits, const int32_t* targets, int64_t n, int64_t c,
                            float* probs, std::string_view where);

// dlogits = (probs − onehot(target)) · scale (overwritten).
void softmax_xent_backward(const float* probs, const int32_t* targets, int64_t n, int64_t c,
                           float scale, float* dlogits);

// Fills `out` with normal(0, std) values drawn from a stream keyed by seed,
// unit name and parameter name.
void fill_normal(std::span<float> out, float std, uint64_t seed, std::string_view unit,
                 std::string_view param);

// Throws tessera::Error (invalid argument) naming `unit` and `what` unless
// count == expected.
void check_count(std::string_view unit, std::string_view what, std::size_t count,
                 std::size_t expected);

// Initialises a unit's parameters by name convention: names ending in "_g"
// (LayerNorm gains) get 1, "_b" or "b" (biases) 0, everything else normal(0,
// 0.02); tied slots are skipped. Throws like check_count on a wrong count.
void init_by_convention(std::string_view unit, std::span<const ParamSpec> specs,
                        std::span<float* const> params, uint64_t seed);

}  // namespace tessera::model::kernels

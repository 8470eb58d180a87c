// Numeric building blocks shared by the reference models: row-major GEMMs
// through OpenBLAS, dense layers, LayerNorm, activations, softmax
// cross-entropy and deterministic initialisation. All on CPU f32, all
// deterministic: OpenBLAS is pinned to one thread on first use, so results
// never depend on how many threads it was configured with.
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

// y[n,out] = x[n,in] · w[in,out] + bias[out] (bias may be null).
void linear_forward(const float* x, const float* w, const float* bias, int64_t n, int64_t in,
                    int64_t out, float* y);

// Backward of linear_forward: dw += xᵀ·dy, dbias += Σrows dy (when non-null),
// dx = dy·wᵀ (overwritten; skipped when dx is null).
void linear_backward(const float* x, const float* w, const float* dy, int64_t n, int64_t in,
                     int64_t out, float* dw, float* dbias, float* dx);

// LayerNorm over the last dimension with eps 1e-5: y = (x − mean)·rstd·g + b.
// Saves mean[n] and rstd[n] for the backward pass.
void layernorm_forward(const float* x, const float* g, const float* b, int64_t n, int64_t d,
                       float* y, float* mean, float* rstd);

// Backward of layernorm_forward: dx += gradient of x (accumulated), dg += ,
// db += .
void layernorm_backward(const float* x, const float* g, const float* mean, const float* rstd,
                        const float* dy, int64_t n, int64_t d, float* dx, float* dg, float* db);

// Activation functions of the models.
enum class Activation { relu, gelu };

// y = act(z) elementwise over `count` values (gelu: the tanh approximation).
void activation_forward(Activation act, const float* z, int64_t count, float* y);

// dz = dy · act'(z) elementwise (overwritten).
void activation_backward(Activation act, const float* z, const float* dy, int64_t count, float* dz);

// Softmax cross-entropy over rows of logits[n,c] with targets[n] in [0, c):
// writes probs[n,c] (may alias logits) and returns Σ_rows (logsumexp − logit[target]) in double.
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

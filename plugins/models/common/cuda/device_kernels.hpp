// The element-wise and row kernels of the CUDA units (device_kernels.cu),
// launched on `stream`. Matrices are row-major f32 in device or managed
// memory. Each kernel computes what its CPU counterpart in
// tessera/models/kernels.hpp computes, with the same formulas (GELU's tanh
// form, max-shifted softmax), in an order of its own.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tessera::model::cuda {

// Bytes of one bfloat16 or float16.
inline constexpr size_t kBf16Bytes = 2;
// out = bfloat16(in), round to nearest even, over `count` elements.
void to_bf16(const float* in, void* out, int64_t count, cudaStream_t stream);
// out = float16(in), round to nearest even (beyond f16's range: infinity),
// over `count` elements.
void to_f16(const float* in, void* out, int64_t count, cudaStream_t stream);

// act: 0 none, 1 ReLU, 2 GELU (tanh form).
enum class Act : int32_t { none = 0, relu = 1, gelu = 2 };

// z[r, j] += b[j] (b may be null); then y = act(z) when y is not null.
void bias_activation(float* z, const float* b, float* y, int64_t rows, int64_t cols, Act act,
                     cudaStream_t stream);
// dz = dy ⊙ act'(z) over `count` elements.
void activation_backward(const float* z, const float* dy, float* dz, int64_t count, Act act,
                         cudaStream_t stream);
// out[j] += Σ_r m[r, j], each column summed in row order.
void column_sum_add(const float* m, int64_t rows, int64_t cols, float* out, cudaStream_t stream);
// probs = softmax(logits) row by row; row_loss[r] = log Σ exp(l - max) + max - l[target].
void softmax_xent(const float* logits, const int32_t* targets, int64_t rows, int64_t cols,
                  float* probs, double* row_loss, cudaStream_t stream);
// *out = (float)(Σ_r row_loss[r] · scale), summed in row order.
void sum_loss(const double* row_loss, int64_t rows, double scale, float* out, cudaStream_t stream);
// dlogits = (probs - onehot(target)) · scale.
void xent_backward(const float* probs, const int32_t* targets, int64_t rows, int64_t cols,
                   float scale, float* dlogits, cudaStream_t stream);

// out[i] += a[i] over `count` elements.
void add_into(float* out, const float* a, int64_t count, cudaStream_t stream);
// z[r, j] += b[j] + residual[r, j] (b or residual may be null).
void bias_residual(float* z, const float* b, const float* residual, int64_t rows, int64_t cols,
                   cudaStream_t stream);

// LayerNorm over rows of x [rows, d] with eps 1e-5: y = (x - mean)·rstd·g + b,
// keeping each row's mean and rstd.
void layernorm_forward(const float* x, const float* g, const float* b, int64_t rows, int64_t d,
                       float* y, float* mean, float* rstd, cudaStream_t stream);
// Its input gradient: dx (+)= rstd·(dy·g - mean(dy·g) - x̂·mean(dy·g·x̂)), added
// to dx when `accumulate`, else written.
void layernorm_backward_input(const float* x, const float* g, const float* mean, const float* rstd,
                              const float* dy, int64_t rows, int64_t d, float* dx, bool accumulate,
                              cudaStream_t stream);
// Its parameter gradients: dg[j] += Σ_r dy[r,j]·x̂[r,j], db[j] += Σ_r dy[r,j].
void layernorm_backward_params(const float* x, const float* mean, const float* rstd,
                               const float* dy, int64_t rows, int64_t d, float* dg, float* db,
                               cudaStream_t stream);

// x[b·T + t, :] = wte[token[b·T + t], :] + wpe[t, :] for `batch` examples
// of `seq` tokens, width d.
void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, int64_t batch,
                       int64_t seq, int64_t d, float* x, cudaStream_t stream);
// dwte[token, :] += dx[row, :] over the rows in order (one thread per column,
// so the sums are in a fixed order); dwpe[t, :] += Σ_b dx[b·T + t, :].
void embedding_backward(const int32_t* tokens, const float* dx, int64_t batch, int64_t seq,
                        int64_t d, float* dwte, float* dwpe, cudaStream_t stream);

// Causal multi-head attention of one block, fused: qkv [batch·seq, 3·d]
// (q, k, v side by side, heads of width dh inside each), out [batch·seq, d]
// = softmax(q·kᵀ·scale, causal)·v per (example, head), and lse [batch,
// heads, seq] the log-sum-exp of each query row's scores. No seq×seq matrix
// is kept: the backward recomputes the probabilities from q, k and lse.
void attention_forward(const float* qkv, int64_t batch, int64_t seq, int64_t heads, int64_t dh,
                       float scale, float* out, float* lse, cudaStream_t stream);
// Its gradient dqkv [batch·seq, 3·d] (written) from dout; `delta` [batch,
// heads, seq] is scratch.
void attention_backward(const float* qkv, const float* out, const float* lse, const float* dout,
                        int64_t batch, int64_t seq, int64_t heads, int64_t dh, float scale,
                        float* delta, float* dqkv, cudaStream_t stream);

}  // namespace tessera::model::cuda

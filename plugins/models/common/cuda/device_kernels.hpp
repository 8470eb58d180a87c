// The element-wise and row kernels of the CUDA units (device_kernels.cu),
// launched on `stream`. Matrices are row-major f32 in device or managed
// memory. Each kernel computes what its CPU counterpart in
// tessera/models/kernels.hpp computes, with the same formulas (GELU's tanh
// form, max-shifted softmax), in an order of its own. A launch the device
// refuses throws KernelError.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace tessera::model::cuda {

// A kernel that did not run: the device refused its launch (its grid,
// block or shared memory), or an earlier kernel's fault surfaced at it.
// The message names the kernel and CUDA's error.
class KernelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bytes of one bfloat16 or float16.
inline constexpr size_t kBf16Bytes = 2;
// The element type of an activation a kernel reads or writes: f32, or the
// 16 bits a bf16 or f16 run keeps it in (the kernels compute in f32).
enum class Elem : int8_t { f32, bf16, f16 };
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
// out[j] += Σ_r m[r, j], each column summed in a fixed order (see
// add_column_sums in device_kernels.cu: the same launch sums the same way
// every time).
void column_sum_add(const float* m, int64_t rows, int64_t cols, float* out, cudaStream_t stream);
// probs = softmax(logits) row by row; row_loss[r] = log Σ exp(l - max) + max - l[target].
void softmax_xent(const float* logits, const int32_t* targets, int64_t rows, int64_t cols,
                  float* probs, double* row_loss, cudaStream_t stream);
// *out = (float)(Σ_r row_loss[r] · scale), summed by one block in a fixed
// order.
void sum_loss(const double* row_loss, int64_t rows, double scale, float* out, cudaStream_t stream);
// The softmax cross-entropy over logits split by columns between the ranks
// of a tensor-parallel group: `logits` [rows, cols] are the columns [lo, lo
// + cols) of the whole rows. Between the steps the caller allreduces mx
// (max) and sums (sum), as tessera::model::parallel_xent_forward does:
//  * row_max: mx[r] = max_j logits[r, j];
//  * exp_sums: probs = exp(logits - mx) (probs must not alias logits),
//    sums[r] = Σ_j probs[r, j] and sums[rows + r] = the target's logit
//    where this rank holds its column, else 0;
//  * xent_normalize: probs /= sums[r], row_loss[r] = log sums[r] + mx[r]
//    - sums[rows + r].
void row_max(const float* logits, int64_t rows, int64_t cols, float* mx, cudaStream_t stream);
void exp_sums(const float* logits, const int32_t* targets, int64_t rows, int64_t cols, int64_t lo,
              const float* mx, float* probs, float* sums, cudaStream_t stream);
void xent_normalize(float* probs, const float* sums, const float* mx, int64_t rows, int64_t cols,
                    double* row_loss, cudaStream_t stream);
// dlogits = (probs - onehot(target - lo)) · scale, `probs` the columns [lo,
// lo + cols) of the whole rows (lo 0: all of them).
void xent_backward(const float* probs, const int32_t* targets, int64_t rows, int64_t cols,
                   int64_t lo, float scale, float* dlogits, cudaStream_t stream);

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
// Its parameter gradients: dg[j] += Σ_r dy[r,j]·x̂[r,j], db[j] += Σ_r dy[r,j],
// summed as column_sum_add sums.
void layernorm_backward_params(const float* x, const float* mean, const float* rstd,
                               const float* dy, int64_t rows, int64_t d, float* dg, float* db,
                               cudaStream_t stream);

// The rows [lo, lo + rows) of the vocabulary that a table holds: all of
// them, or a rank's under tensor parallelism (its wte rows).
struct VocabRange {
  int64_t lo;
  int64_t rows;
};
// x[b·T + t, :] = wte[token[b·T + t] - lo, :] + wpe[t, :] for `batch`
// examples of `seq` tokens, width d (wpe null: no position term); zeros
// for a token the table does not hold, so that the sum over the ranks of
// a vocabulary-parallel table is the whole lookup with its position.
void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, int64_t batch,
                       int64_t seq, int64_t d, VocabRange held, float* x, cudaStream_t stream);
// The rows of a batch grouped by their token, for the scatter of the
// embedding's gradient, made on the host from the batch's token ids: the
// distinct tokens a table holds (`held`), ascending, and each one's rows in
// row order, token k's at order[starts[k] .. starts[k + 1]).
struct TokenRows {
  std::vector<int32_t> tokens;
  std::vector<int32_t> starts;
  std::vector<int32_t> order;
  static TokenRows of(const int32_t* ids, int64_t count, VocabRange held) {
    TokenRows t;
    for (int64_t r = 0; r < count; ++r) {
      if (ids[r] >= held.lo && ids[r] < held.lo + held.rows) {
        t.order.push_back(static_cast<int32_t>(r));
      }
    }
    std::stable_sort(t.order.begin(), t.order.end(),
                     [ids](int32_t a, int32_t b) { return ids[a] < ids[b]; });
    for (size_t i = 0; i < t.order.size(); ++i) {
      const int32_t token = ids[t.order[i]];
      if (t.tokens.empty() || t.tokens.back() != token) {
        t.tokens.push_back(token);
        t.starts.push_back(static_cast<int32_t>(i));
      }
    }
    t.starts.push_back(static_cast<int32_t>(t.order.size()));
    return t;
  }
};
// A TokenRows' arrays where the device reads them.
struct TokenRowsView {
  const int32_t* tokens;
  const int32_t* starts;
  const int32_t* order;
  int64_t distinct;  // tokens
};
// dwte[token - lo, :] += dx[row, :] over each held token's rows in row
// order (`rows`: the batch's rows grouped by token; one block per token,
// its threads over the columns, so every sum is in a fixed order and the
// tokens are summed at once); dwpe[t, :] += Σ_b dx[b·T + t, :] (skipped
// when dwpe is null).
void embedding_backward(const TokenRowsView& rows, const float* dx, int64_t batch, int64_t seq,
                        int64_t d, VocabRange held, float* dwte, float* dwpe, cudaStream_t stream);
// Its position part alone: dwpe[t, :] += Σ_b dx[b·T + t, :] (dx: `batch`
// examples of `seq` positions; a rank's positions under sequence
// parallelism, dwpe then pointing at its first).
void position_backward(const float* dx, int64_t batch, int64_t seq, int64_t d, float* dwpe,
                       cudaStream_t stream);

// RMSNorm over rows of x [rows, d]: y = x·rstd·g with rstd = 1/sqrt(mean(x²)
// + eps), keeping each row's rstd.
void rmsnorm_forward(const float* x, const float* g, int64_t rows, int64_t d, float eps, float* y,
                     float* rstd, cudaStream_t stream);
// Its input gradient: dx (+)= rstd·(dy·g - x̂·mean(dy·g·x̂)) with x̂ = x·rstd,
// added to dx when `accumulate`, else written.
void rmsnorm_backward_input(const float* x, const float* g, const float* rstd, const float* dy,
                            int64_t rows, int64_t d, float* dx, bool accumulate,
                            cudaStream_t stream);
// Its gain's gradient: dg[j] += Σ_r dy[r,j]·x̂[r,j], summed as column_sum_add sums.
void rmsnorm_backward_params(const float* x, const float* rstd, const float* dy, int64_t rows,
                             int64_t d, float* dg, cudaStream_t stream);

// Rotary position embedding in place on x [rows, heads·hd], row r at
// position r % seq: each head's pairs (2i, 2i+1) rotated by the angle whose
// cosine and sine are cos[t·hd/2 + i], sin[t·hd/2 + i]; `inverse` rotates
// back (the transpose, for gradients).
void rope_apply(float* x, int64_t rows, int64_t seq, int64_t heads, int64_t hd, const float* cos,
                const float* sin, bool inverse, cudaStream_t stream);

// y = silu(gate) ⊙ up over `count` elements, gate and up of type `elem`.
void swiglu_forward(const void* gate, const void* up, Elem elem, int64_t count, float* y,
                    cudaStream_t stream);
// Its gradients from dy: dgate = dy·up·silu'(gate), dup = dy·silu(gate).
void swiglu_backward(const void* gate, const void* up, Elem elem, const float* dy, int64_t count,
                     float* dgate, float* dup, cudaStream_t stream);

// Causal attention with grouped key/value heads, fused. Row t of example b
// is row b·seq + t of q (q_stride elements apart, query head h at column
// h·dh) and of k and v (kv_stride apart, key/value head g at column g·dh);
// query head h reads key/value head h / (heads / kv_heads). gpt's fused
// qkv [rows, 3·d] is q = qkv, k = qkv + d, v = qkv + 2·d with both strides
// 3·d. A rank of a tensor-parallel group holds some of the heads: with
// `group` > 0 its query head h is the model's head q_first + h, which
// reads the model's key/value head (q_first + h) / group, its head
// (q_first + h) / group − kv_first here (the key/value heads a rank holds
// may be all of them, kv_first 0, and some read by none of its query
// heads: their gradients are zero).
struct Attention {
  const void* q;  // of type `elem`, as k and v
  const void* k;
  const void* v;
  int64_t q_stride;
  int64_t kv_stride;
  int64_t batch;
  int64_t seq;
  int64_t heads;
  int64_t kv_heads;
  int64_t dh;
  float scale;        // of the scores q·kᵀ
  int64_t group = 0;  // the model's query heads per key/value head; 0: heads / kv_heads
  int64_t q_first = 0;
  int64_t kv_first = 0;
  Elem elem = Elem::f32;
};
// out [batch·seq, heads·dh] = softmax(q·kᵀ·scale, causal)·v per (example,
// head), and lse [batch, heads, seq] the log-sum-exp of each query row's
// scores. The kernels work in tiles of up to 32 positions held in shared
// memory (flash-attention style: an online softmax forward, the backward
// recomputing the probabilities from q, k and lse), so no seq×seq matrix
// exists and the sequence has no length limit; the tile is the widest whose
// block fits the device's shared memory for dh. A dh too large for even a
// one-row tile throws KernelError.
void attention_forward(const Attention& a, void* out, float* lse, cudaStream_t stream);
// `out` is of q's type. Its gradients (written, f32) from dout (f32): dq
// with q's layout, dk and dv with k's and v's (the sum over the query heads
// of each group); `delta` [batch, heads, seq] is scratch (each row's
// dout · out).
void attention_backward(const Attention& a, const void* out, const float* lse, const float* dout,
                        float* delta, float* dq, float* dk, float* dv, cudaStream_t stream);

}  // namespace tessera::model::cuda

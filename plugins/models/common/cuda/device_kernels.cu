// The CUDA units' kernels (see device_kernels.hpp).
#include "device_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>
#include <string>

namespace tessera::model::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

unsigned blocks_for(int64_t count) {
  const int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 32 ? (b > 0 ? b : 1) : 65535 * 32);
}

__device__ float act_forward(float u, Act act) {
  if (act == Act::relu) return u > 0.0f ? u : 0.0f;
  if (act == Act::gelu) return 0.5f * u * (1.0f + tanhf(kGeluC * (u + kGeluA * u * u * u)));
  return u;
}

__device__ float act_derivative(float u, Act act) {
  if (act == Act::relu) return u > 0.0f ? 1.0f : 0.0f;
  if (act == Act::gelu) {
    const float t = tanhf(kGeluC * (u + kGeluA * u * u * u));
    const float dt = (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * u * u);
    return 0.5f * (1.0f + t) + 0.5f * u * dt;
  }
  return 1.0f;
}

// An activation kept in its element type (Elem) as the kernels compute
// with it (f32), and back.
__device__ float to_f32(float x) { return x; }
__device__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float to_f32(__half x) { return __half2float(x); }
__device__ void store(float* to, float x) { *to = x; }
__device__ void store(__nv_bfloat16* to, float x) { *to = __float2bfloat16_rn(x); }
__device__ void store(__half* to, float x) { *to = __float2half_rn(x); }

// Calls f(T{}) with T the C++ type of `elem`.
template <typename F>
void with_elem(Elem elem, F&& f) {
  switch (elem) {
    case Elem::f32:
      f(float{});
      return;
    case Elem::bf16:
      f(__nv_bfloat16{});
      return;
    case Elem::f16:
      f(__half{});
      return;
  }
}

// Sum (or maximum) of every thread's v over a block of kThreads threads;
// every thread gets the result. `shared` holds kThreads floats.
__device__ float block_sum(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();
  return total;
}

__device__ float block_max(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();
  return total;
}

__global__ void bias_activation_kernel(float* z, const float* b, float* y, int64_t count,
                                       int64_t cols, Act act) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    float v = z[i];
    if (b != nullptr) v += b[i % cols];
    z[i] = v;
    if (y != nullptr) y[i] = act_forward(v, act);
  }
}

__global__ void activation_backward_kernel(const float* z, const float* dy, float* dz,
                                           int64_t count, Act act) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    dz[i] = act == Act::relu ? (z[i] > 0.0f ? dy[i] : 0.0f) : dy[i] * act_derivative(z[i], act);
  }
}

// Threads of a block of column sums (add_column_sums).
constexpr int kColumnThreads = 1024;

// For every column j of a [rows, cols] matrix, out0[j] += Σ_r of the first
// term of terms(r, j) and out1[j] (when not null) += Σ_r of the second, in
// a fixed order: a block takes `width` = min(32, blockDim.x) adjacent
// columns (a warp reads a row's run of them at once); its blockDim.x /
// width lanes each sum every lanes-th row from its own first, in order;
// then each column's lane 0 adds the lanes' sums in lane order. So a
// column is summed by many threads at once rather than row after row by
// one, and the same launch sums the same way every time.
template <typename Terms>
__device__ void add_column_sums(int64_t rows, int64_t cols, const Terms& terms, float* out0,
                                float* out1) {
  __shared__ float shared[2 * kColumnThreads];
  const unsigned width = blockDim.x < 32 ? blockDim.x : 32;
  const unsigned lanes = blockDim.x / width;
  const unsigned column = threadIdx.x % width;
  const unsigned lane = threadIdx.x / width;
  for (int64_t first = blockIdx.x * int64_t{width}; first < cols;
       first += int64_t{gridDim.x} * width) {
    const int64_t j = first + column;
    float s0 = 0.0f;
    float s1 = 0.0f;
    if (j < cols && lane < lanes) {
      for (int64_t r = lane; r < rows; r += lanes) terms(r, j, s0, s1);
    }
    shared[threadIdx.x] = s0;
    shared[kColumnThreads + threadIdx.x] = s1;
    __syncthreads();
    if (lane == 0 && j < cols) {
      float t0 = 0.0f;
      float t1 = 0.0f;
      for (unsigned k = 0; k < lanes; ++k) {
        t0 += shared[k * width + column];
        t1 += shared[kColumnThreads + k * width + column];
      }
      out0[j] += t0;
      if (out1 != nullptr) out1[j] += t1;
    }
    __syncthreads();  // the shared sums are read before the next columns'
  }
}

// Blocks for `cols` columns, 32 to a block.
unsigned column_blocks(int64_t cols) {
  const int64_t b = (cols + 31) / 32;
  return static_cast<unsigned>(b < 65535 * 32 ? (b > 0 ? b : 1) : 65535 * 32);
}

struct MatrixTerm {
  const float* m;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t j, float& s0, float& /*s1*/) const {
    s0 += m[r * cols + j];
  }
};

__global__ void column_sum_add_kernel(const float* m, int64_t rows, int64_t cols, float* out) {
  add_column_sums(rows, cols, MatrixTerm{m, cols}, out, nullptr);
}

// One block per row: the maximum, the sum of exponentials, then the
// normalised row; thread 0 writes the row's loss.
__global__ void softmax_xent_kernel(const float* logits, const int32_t* targets, int64_t cols,
                                    float* probs, double* row_loss) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float* in = logits + r * cols;
  float* out = probs + r * cols;
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) mx = fmaxf(mx, in[j]);
  mx = block_max(mx, shared);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float e = expf(in[j] - mx);
    out[j] = e;
    sum += e;
  }
  sum = block_sum(sum, shared);
  const float target_logit = in[targets[r]];
  const float inv = 1.0f / sum;
  __syncthreads();  // every thread has read the logits (probs may alias them)
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) out[j] *= inv;
  if (threadIdx.x == 0) {
    row_loss[r] = log(static_cast<double>(sum)) + static_cast<double>(mx) - target_logit;
  }
}

// The cross-entropy over logits split by columns, in three steps around
// the group's allreduces (one block per row each): this rank's row maxima;
// the exponentials shifted by the whole rows' maxima, their sums and the
// target logits held here; the normalised rows and their losses.
__global__ void row_max_kernel(const float* logits, int64_t cols, float* mx) {
  __shared__ float shared[kThreads];
  const float* in = logits + blockIdx.x * cols;
  float m = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, in[j]);
  m = block_max(m, shared);
  if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

__global__ void exp_sums_kernel(const float* logits, const int32_t* targets, int64_t rows,
                                int64_t cols, int64_t lo, const float* mx, float* probs,
                                float* sums) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float* in = logits + r * cols;
  float* out = probs + r * cols;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float e = expf(in[j] - mx[r]);
    out[j] = e;
    sum += e;
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) {
    const int64_t t = targets[r] - lo;
    sums[r] = sum;
    sums[rows + r] = t >= 0 && t < cols ? in[t] : 0.0f;
  }
}

__global__ void xent_normalize_kernel(float* probs, const float* sums, const float* mx,
                                      int64_t cols, double* row_loss) {
  const int64_t r = blockIdx.x;
  float* out = probs + r * cols;
  const float inv = 1.0f / sums[r];
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) out[j] *= inv;
  if (threadIdx.x == 0) {
    const int64_t rows = gridDim.x;
    row_loss[r] = log(static_cast<double>(sums[r])) + static_cast<double>(mx[r]) - sums[rows + r];
  }
}

// One block: each thread sums every blockDim.x-th row from its own first,
// in order, and the threads' sums are added pairwise in a fixed tree (the
// same launch sums the same way every time).
__global__ void sum_loss_kernel(const double* row_loss, int64_t rows, double scale, float* out) {
  __shared__ double shared[kThreads];
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum += row_loss[r];
  shared[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = static_cast<float>(shared[0] * scale);
}

__global__ void xent_backward_kernel(const float* probs, const int32_t* targets, int64_t count,
                                     int64_t cols, int64_t lo, float scale, float* dlogits) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols;
    const int64_t j = i - r * cols;
    float v = probs[i] * scale;
    if (j == targets[r] - lo) v -= scale;
    dlogits[i] = v;
  }
}

__global__ void to_bf16_kernel(const float* in, __nv_bfloat16* out, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

__global__ void to_f16_kernel(const float* in, __half* out, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __float2half_rn(in[i]);
  }
}

__global__ void add_into_kernel(float* out, const float* a, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] += a[i];
  }
}

__global__ void bias_residual_kernel(float* z, const float* b, const float* residual, int64_t count,
                                     int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    float v = z[i];
    if (b != nullptr) v += b[i % cols];
    if (residual != nullptr) v += residual[i];
    z[i] = v;
  }
}

constexpr float kLayerNormEps = 1e-5f;

// One block per row.
__global__ void layernorm_forward_kernel(const float* x, const float* g, const float* b, int64_t d,
                                         float* y, float* mean, float* rstd) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float* in = x + r * d;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += in[j];
  const float m = block_sum(sum, shared) / static_cast<float>(d);
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float c = in[j] - m;
    sq += c * c;
  }
  const float rs = rsqrtf(block_sum(sq, shared) / static_cast<float>(d) + kLayerNormEps);
  float* out = y + r * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) out[j] = (in[j] - m) * rs * g[j] + b[j];
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

__global__ void layernorm_backward_input_kernel(const float* x, const float* g, const float* mean,
                                                const float* rstd, const float* dy, int64_t d,
                                                float* dx, bool accumulate) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float m = mean[r];
  const float rs = rstd[r];
  const float* in = x + r * d;
  const float* grad = dy + r * d;
  float s1 = 0.0f;
  float s2 = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float gy = grad[j] * g[j];
    s1 += gy;
    s2 += gy * (in[j] - m) * rs;
  }
  const float mean_gy = block_sum(s1, shared) / static_cast<float>(d);
  const float mean_gyx = block_sum(s2, shared) / static_cast<float>(d);
  float* out = dx + r * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float xhat = (in[j] - m) * rs;
    const float v = rs * (grad[j] * g[j] - mean_gy - xhat * mean_gyx);
    out[j] = accumulate ? out[j] + v : v;
  }
}

// One thread per column (a grid-stride loop), rows in order.
// dy·x̂ (x̂ = (x - mean)·rstd) and dy, LayerNorm's gain and bias terms.
struct LayerNormTerms {
  const float* x;
  const float* mean;
  const float* rstd;
  const float* dy;
  int64_t d;
  __device__ void operator()(int64_t r, int64_t j, float& sg, float& sb) const {
    const float grad = dy[r * d + j];
    sg += grad * (x[r * d + j] - mean[r]) * rstd[r];
    sb += grad;
  }
};

__global__ void layernorm_backward_params_kernel(const float* x, const float* mean,
                                                 const float* rstd, const float* dy, int64_t rows,
                                                 int64_t d, float* dg, float* db) {
  add_column_sums(rows, d, LayerNormTerms{x, mean, rstd, dy, d}, dg, db);
}

__global__ void embedding_forward_kernel(const int32_t* tokens, const float* wte, const float* wpe,
                                         int64_t count, int64_t seq, int64_t d, int64_t lo,
                                         int64_t held, float* x) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / d;
    const int64_t j = i - row * d;
    const int64_t t = tokens[row] - lo;
    if (t < 0 || t >= held) {
      x[i] = 0.0f;
      continue;
    }
    const float w = wte[t * d + j];
    x[i] = wpe != nullptr ? w + wpe[(row % seq) * d + j] : w;
  }
}

// One block per distinct token, its threads over the columns: the
// token's rows added in row order.
__global__ void embedding_backward_wte_kernel(TokenRowsView rows, const float* dx, int64_t d,
                                              int64_t lo, float* dwte) {
  for (int64_t k = blockIdx.x; k < rows.distinct; k += gridDim.x) {
    float* out = dwte + (rows.tokens[k] - lo) * d;
    const int32_t first = rows.starts[k];
    const int32_t end = rows.starts[k + 1];
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      float v = out[j];
      for (int32_t i = first; i < end; ++i) v += dx[int64_t{rows.order[i]} * d + j];
      out[j] = v;
    }
  }
}

__global__ void embedding_backward_wpe_kernel(const float* dx, int64_t batch, int64_t seq,
                                              int64_t d, float* dwpe) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < seq * d;
       i += int64_t{gridDim.x} * blockDim.x) {
    float sum = 0.0f;
    for (int64_t b = 0; b < batch; ++b) sum += dx[b * seq * d + i];
    dwpe[i] += sum;
  }
}

// ---- Attention, in tiles ----
//
// A block works on one (example, head) and one tile of `tile` consecutive
// positions; the other side's positions stream through shared memory a
// tile at a time, so no seq×seq matrix exists anywhere and a tile's rows
// are read once per tile rather than once per row. Every sum runs in a
// fixed order: a run repeats bit for bit. A key/value tile's rows are
// `ld` floats apart (an odd count), so that the lanes of a warp reading one
// element of 32 different rows hit 32 different banks.

// One (example, query head): where its rows of q, k and v are, its rows in
// a [batch·seq, heads·dh] tensor (the output and its gradient), and its
// entry of a [batch, heads, seq] statistic.
// The model's query heads per key/value head.
__device__ int64_t group_of(const Attention& a) {
  return a.group > 0 ? a.group : a.heads / a.kv_heads;
}

template <typename T>
struct HeadRows {
  Attention a;
  int64_t bh, row0, q_col, kv_col;
  __device__ HeadRows(const Attention& at, int64_t b, int64_t h)
      : a(at), bh(b * at.heads + h), row0(b * at.seq), q_col(h * at.dh) {
    kv_col = ((at.q_first + h) / group_of(at) - at.kv_first) * at.dh;
  }
  __device__ int64_t q_row(int64_t t) const { return (row0 + t) * a.q_stride + q_col; }
  __device__ int64_t kv_row(int64_t t) const { return (row0 + t) * a.kv_stride + kv_col; }
  __device__ const T* q(int64_t t) const { return static_cast<const T*>(a.q) + q_row(t); }
  __device__ const T* k(int64_t t) const { return static_cast<const T*>(a.k) + kv_row(t); }
  __device__ const T* v(int64_t t) const { return static_cast<const T*>(a.v) + kv_row(t); }
  __device__ int64_t row(int64_t t) const { return (row0 + t) * a.heads * a.dh + q_col; }
  __device__ int64_t stat(int64_t t) const { return bh * a.seq + t; }
};

// The (example, query head) of a block of grid (batch·heads, tiles).
template <typename T>
__device__ HeadRows<T> query_head(const Attention& a) {
  const int64_t b = blockIdx.x / a.heads;
  return HeadRows<T>(a, b, blockIdx.x - b * a.heads);
}

__host__ __device__ int64_t padded_row(int64_t dh) { return dh % 2 == 0 ? dh + 1 : dh; }

// The positions of a tile of `t` starting at `first` that the sequence has.
__device__ int64_t tile_rows(int64_t seq, int64_t first, int64_t t) {
  return seq - first < t ? seq - first : t;
}

// Shared floats of the three kernels' blocks for a tile of t rows:
// forward: q and the output [t, dh], keys then values [t, ld], the scores
// [t, t+1], and three per-row statistics; dq: q, dout and dq [t, dh], keys
// and values [t, ld], the score gradients [t, t+1], lse and delta; dkv:
// keys and values [t, ld], dk, dv, q and dout [t, dh], probabilities and
// score gradients [t, t+1], lse and delta.
struct AttentionShared {
  static int64_t forward(int64_t t, int64_t dh) {
    return 2 * t * dh + t * padded_row(dh) + t * (t + 1) + 3 * t;
  }
  static int64_t dq(int64_t t, int64_t dh) {
    return 3 * t * dh + 2 * t * padded_row(dh) + t * (t + 1) + 2 * t;
  }
  static int64_t dkv(int64_t t, int64_t dh) {
    return 4 * t * dh + 2 * t * padded_row(dh) + 2 * t * (t + 1) + 2 * t;
  }
};

// Rows [0, t) of a [rows, dh] source (row r at src(r), f32 or 16-bit) into
// `dst` as f32 with rows `ld` apart; rows at or past `count` are zeros.
template <typename Src>
__device__ void load_tile(float* dst, int64_t t, int64_t dh, int64_t ld, int64_t count, Src src) {
  for (int64_t idx = threadIdx.x; idx < t * dh; idx += blockDim.x) {
    const int64_t r = idx / dh;
    const int64_t e = idx - r * dh;
    dst[r * ld + e] = r < count ? to_f32(src(r)[e]) : 0.0f;
  }
}

// Σ_c w[c]·tile[c·ld + e] over the tile's first `cols` rows: element e of
// the rows weighted by w.
__device__ float weighted_rows(const float* w, const float* tile, int64_t cols, int64_t ld,
                               int64_t e) {
  float acc = 0.0f;
  for (int64_t c = 0; c < cols; ++c) acc += w[c] * tile[c * ld + e];
  return acc;
}

__device__ float dot(const float* x, const float* y, int64_t n) {
  float s = 0.0f;
  for (int64_t e = 0; e < n; ++e) s += x[e] * y[e];
  return s;
}

// Forward: grid (batch·heads, ⌈seq / tile⌉). The block's query tile
// starts at i0; the key tiles 0..i0 stream through (later ones are masked
// whole), with the running maximum and sum of each row (online softmax).
template <typename T>
__global__ void attention_forward_kernel(const Attention a, int64_t tile, T* out, float* lse) {
  extern __shared__ float smem[];
  const int64_t t = tile;
  const int64_t dh = a.dh;
  const int64_t ld = padded_row(dh);
  const int64_t sp = t + 1;
  float* q = smem;         // [t, dh]
  float* o = q + t * dh;   // [t, dh]: unnormalised output
  float* kv = o + t * dh;  // [t, ld]: keys, then values
  float* s = kv + t * ld;  // [t, sp]: scores, then probabilities
  float* m = s + t * sp;   // running maximum
  float* l = m + t;        // running sum
  float* alpha = l + t;    // this step's rescale of o
  const HeadRows<T> at = query_head<T>(a);
  const int64_t i0 = blockIdx.y * t;
  const int64_t rows = tile_rows(a.seq, i0, t);
  load_tile(q, t, dh, dh, rows, [&](int64_t r) { return at.q(i0 + r); });
  for (int64_t idx = threadIdx.x; idx < t * dh; idx += blockDim.x) o[idx] = 0.0f;
  for (int64_t r = threadIdx.x; r < t; r += blockDim.x) {
    m[r] = -FLT_MAX;
    l[r] = 0.0f;
  }
  for (int64_t j0 = 0; j0 <= i0; j0 += t) {
    const int64_t cols = tile_rows(a.seq, j0, t);
    __syncthreads();  // the last step's reads of kv and s are done
    load_tile(kv, t, dh, ld, cols, [&](int64_t c) { return at.k(j0 + c); });
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < t * t; idx += blockDim.x) {
      const int64_t r = idx / t;
      const int64_t c = idx - r * t;
      const bool seen = r < rows && j0 + c <= i0 + r;  // causal; j0 + c < seq then
      s[r * sp + c] = seen ? dot(q + r * dh, kv + c * ld, dh) * a.scale : -INFINITY;
    }
    __syncthreads();
    load_tile(kv, t, dh, ld, cols, [&](int64_t c) { return at.v(j0 + c); });
    for (int64_t r = threadIdx.x; r < t; r += blockDim.x) {
      float* row = s + r * sp;
      if (r >= rows) {
        for (int64_t c = 0; c < t; ++c) row[c] = 0.0f;
        alpha[r] = 1.0f;
        continue;
      }
      // Key j0 <= i0 + r is always seen: mx is finite.
      float mx = m[r];
      for (int64_t c = 0; c < t; ++c) mx = fmaxf(mx, row[c]);
      float sum = 0.0f;
      for (int64_t c = 0; c < t; ++c) {
        row[c] = expf(row[c] - mx);  // 0 where masked
        sum += row[c];
      }
      alpha[r] = expf(m[r] - mx);
      l[r] = l[r] * alpha[r] + sum;
      m[r] = mx;
    }
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < t * dh; idx += blockDim.x) {
      const int64_t r = idx / dh;
      o[idx] = o[idx] * alpha[r] + weighted_rows(s + r * sp, kv, cols, ld, idx - r * dh);
    }
  }
  __syncthreads();
  for (int64_t idx = threadIdx.x; idx < rows * dh; idx += blockDim.x) {
    const int64_t r = idx / dh;
    const int64_t e = idx - r * dh;
    store(out + at.row(i0 + r) + e, o[idx] / l[r]);
  }
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    lse[at.stat(i0 + r)] = m[r] + logf(l[r]);
  }
}

// p = exp(q·k·scale − lse) and ds = p (dout·v − delta) of one query row and
// one key row.
struct ScoreGrad {
  float p;
  float ds;
};
__device__ ScoreGrad score_grad(const float* q, const float* k, const float* go, const float* v,
                                int64_t dh, float scale, float lse, float delta) {
  const float p = expf(dot(q, k, dh) * scale - lse);
  return {p, p * (dot(go, v, dh) - delta)};
}

// dq_i = scale · Σ_{j<=i} ds_ij k_j: grid (batch·heads, ⌈seq / tile⌉), the
// key tiles 0..i0 streaming through. It also writes delta_i = dout_i ·
// out_i (= Σ_j p_ij dp_ij), which the dk/dv kernel reads after it.
template <typename T>
__global__ void attention_dq_kernel(const Attention a, int64_t tile, const T* out, const float* lse,
                                    const float* dout, float* delta, float* dq_out) {
  extern __shared__ float smem[];
  const int64_t t = tile;
  const int64_t dh = a.dh;
  const int64_t ld = padded_row(dh);
  const int64_t sp = t + 1;
  float* q = smem;          // [t, dh]
  float* go = q + t * dh;   // [t, dh]: dout
  float* dq = go + t * dh;  // [t, dh]: out ⊙ dout first, then dq / scale
  float* k = dq + t * dh;   // [t, ld]
  float* v = k + t * ld;    // [t, ld]
  float* ds = v + t * ld;   // [t, sp]
  float* ls = ds + t * sp;  // lse
  float* dl = ls + t;       // delta
  const HeadRows<T> at = query_head<T>(a);
  const int64_t i0 = blockIdx.y * t;
  const int64_t rows = tile_rows(a.seq, i0, t);
  load_tile(q, t, dh, dh, rows, [&](int64_t r) { return at.q(i0 + r); });
  load_tile(go, t, dh, dh, rows, [&](int64_t r) { return dout + at.row(i0 + r); });
  load_tile(dq, t, dh, dh, rows, [&](int64_t r) { return out + at.row(i0 + r); });
  __syncthreads();
  for (int64_t idx = threadIdx.x; idx < t * dh; idx += blockDim.x) dq[idx] *= go[idx];
  __syncthreads();
  for (int64_t r = threadIdx.x; r < t; r += blockDim.x) {
    float sum = 0.0f;
    for (int64_t e = 0; e < dh; ++e) sum += dq[r * dh + e];
    dl[r] = sum;
    ls[r] = r < rows ? lse[at.stat(i0 + r)] : 0.0f;
    if (r < rows) delta[at.stat(i0 + r)] = sum;
  }
  __syncthreads();
  for (int64_t idx = threadIdx.x; idx < t * dh; idx += blockDim.x) dq[idx] = 0.0f;
  for (int64_t j0 = 0; j0 <= i0; j0 += t) {
    const int64_t cols = tile_rows(a.seq, j0, t);
    __syncthreads();  // the last step's reads of k, v and ds are done
    load_tile(k, t, dh, ld, cols, [&](int64_t c) { return at.k(j0 + c); });
    load_tile(v, t, dh, ld, cols, [&](int64_t c) { return at.v(j0 + c); });
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < t * t; idx += blockDim.x) {
      const int64_t r = idx / t;
      const int64_t c = idx - r * t;
      ds[r * sp + c] = r < rows && j0 + c <= i0 + r
                           ? score_grad(q + r * dh, k + c * ld, go + r * dh, v + c * ld, dh,
                                        a.scale, ls[r], dl[r])
                                 .ds
                           : 0.0f;
    }
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < t * dh; idx += blockDim.x) {
      const int64_t r = idx / dh;
      dq[idx] += weighted_rows(ds + r * sp, k, cols, ld, idx - r * dh);
    }
  }
  // Each thread writes the elements it summed.
  for (int64_t idx = threadIdx.x; idx < rows * dh; idx += blockDim.x) {
    const int64_t r = idx / dh;
    dq_out[at.q_row(i0 + r) + idx - r * dh] = dq[idx] * a.scale;
  }
}

// dk_j = scale · Σ_h Σ_{i>=j} ds^h_ij q^h_i ; dv_j = Σ_h Σ_{i>=j} p^h_ij
// dout^h_i, over the query heads h here of key/value head g: grid
// (batch·kv_heads, ⌈seq / tile⌉), the block's key tile starting at j0 and
// the query tiles j0..seq of each of those heads streaming through.
template <typename T>
__global__ void attention_dkv_kernel(const Attention a, int64_t tile, const float* lse,
                                     const float* dout, const float* delta, float* dk_out,
                                     float* dv_out) {
  extern __shared__ float smem[];
  const int64_t t = tile;
  const int64_t dh = a.dh;
  const int64_t ld = padded_row(dh);
  const int64_t sp = t + 1;
  const int64_t group = group_of(a);
  float* k = smem;          // [t, ld]
  float* v = k + t * ld;    // [t, ld]
  float* dk = v + t * ld;   // [t, dh]: dk / scale
  float* dv = dk + t * dh;  // [t, dh]
  float* q = dv + t * dh;   // [t, dh]
  float* go = q + t * dh;   // [t, dh]: dout
  float* ps = go + t * dh;  // [t, sp]
  float* ds = ps + t * sp;  // [t, sp]
  float* ls = ds + t * sp;  // lse
  float* dl = ls + t;       // delta
  const int64_t b = blockIdx.x / a.kv_heads;
  const int64_t g = blockIdx.x - b * a.kv_heads;
  const int64_t j0 = blockIdx.y * t;
  const int64_t cols = tile_rows(a.seq, j0, t);
  // The query heads here that read key/value head g: [h0, h1).
  const int64_t model_g = g + a.kv_first;
  const int64_t h0 = model_g * group - a.q_first > 0 ? model_g * group - a.q_first : 0;
  const int64_t h1 =
      (model_g + 1) * group - a.q_first < a.heads ? (model_g + 1) * group - a.q_first : a.heads;
  const int64_t kv_row0 = (b * a.seq + j0) * a.kv_stride + g * dh;
  const auto kv_at = [&](int64_t c) { return kv_row0 + c * a.kv_stride; };
  for (int64_t idx = threadIdx.x; idx < t * dh; idx += blockDim.x) {
    dk[idx] = 0.0f;
    dv[idx] = 0.0f;
  }
  load_tile(k, t, dh, ld, cols, [&](int64_t c) { return static_cast<const T*>(a.k) + kv_at(c); });
  load_tile(v, t, dh, ld, cols, [&](int64_t c) { return static_cast<const T*>(a.v) + kv_at(c); });
  for (int64_t h = h0; h < h1; ++h) {
    const HeadRows<T> at(a, b, h);
    for (int64_t i0 = j0; i0 < a.seq; i0 += t) {
      const int64_t rows = tile_rows(a.seq, i0, t);
      __syncthreads();  // the last step's reads of q, go, ps and ds are done
      load_tile(q, t, dh, dh, rows, [&](int64_t r) { return at.q(i0 + r); });
      load_tile(go, t, dh, dh, rows, [&](int64_t r) { return dout + at.row(i0 + r); });
      for (int64_t r = threadIdx.x; r < t; r += blockDim.x) {
        ls[r] = r < rows ? lse[at.stat(i0 + r)] : 0.0f;
        dl[r] = r < rows ? delta[at.stat(i0 + r)] : 0.0f;
      }
      __syncthreads();
      for (int64_t idx = threadIdx.x; idx < t * t; idx += blockDim.x) {
        const int64_t r = idx / t;
        const int64_t c = idx - r * t;
        ScoreGrad sg{0.0f, 0.0f};
        if (r < rows && c < cols && j0 + c <= i0 + r) {
          sg = score_grad(q + r * dh, k + c * ld, go + r * dh, v + c * ld, dh, a.scale, ls[r],
                          dl[r]);
        }
        ps[r * sp + c] = sg.p;
        ds[r * sp + c] = sg.ds;
      }
      __syncthreads();
      for (int64_t idx = threadIdx.x; idx < t * dh; idx += blockDim.x) {
        const int64_t c = idx / dh;
        const int64_t e = idx - c * dh;
        float acc_k = 0.0f;
        float acc_v = 0.0f;
        for (int64_t r = 0; r < rows; ++r) {
          acc_k += ds[r * sp + c] * q[r * dh + e];
          acc_v += ps[r * sp + c] * go[r * dh + e];
        }
        dk[idx] += acc_k;
        dv[idx] += acc_v;
      }
    }
  }
  // Each thread writes the elements it summed (zeros where no query head
  // here reads head g).
  for (int64_t idx = threadIdx.x; idx < cols * dh; idx += blockDim.x) {
    const int64_t c = idx / dh;
    const int64_t e = idx - c * dh;
    dk_out[kv_at(c) + e] = dk[idx] * a.scale;
    dv_out[kv_at(c) + e] = dv[idx];
  }
}

// ---- llama's kernels ----

// One block per row.
__global__ void rmsnorm_forward_kernel(const float* x, const float* g, int64_t d, float eps,
                                       float* y, float* rstd) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float* in = x + r * d;
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sq += in[j] * in[j];
  const float rs = 1.0f / sqrtf(block_sum(sq, shared) / static_cast<float>(d) + eps);
  float* out = y + r * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) out[j] = in[j] * rs * g[j];
  if (threadIdx.x == 0) rstd[r] = rs;
}

__global__ void rmsnorm_backward_input_kernel(const float* x, const float* g, const float* rstd,
                                              const float* dy, int64_t d, float* dx,
                                              bool accumulate) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float rs = rstd[r];
  const float* in = x + r * d;
  const float* grad = dy + r * d;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += grad[j] * g[j] * in[j] * rs;
  const float mean_gyx = block_sum(s, shared) / static_cast<float>(d);
  float* out = dx + r * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = rs * (grad[j] * g[j] - in[j] * rs * mean_gyx);
    out[j] = accumulate ? out[j] + v : v;
  }
}

// One thread per column (a grid-stride loop), rows in order.
// dy·x·rstd, RMSNorm's gain term.
struct RmsNormTerm {
  const float* x;
  const float* rstd;
  const float* dy;
  int64_t d;
  __device__ void operator()(int64_t r, int64_t j, float& sg, float& /*unused*/) const {
    sg += dy[r * d + j] * x[r * d + j] * rstd[r];
  }
};

__global__ void rmsnorm_backward_params_kernel(const float* x, const float* rstd, const float* dy,
                                               int64_t rows, int64_t d, float* dg) {
  add_column_sums(rows, d, RmsNormTerm{x, rstd, dy, d}, dg, nullptr);
}

// One thread per rotated pair.
__global__ void rope_kernel(float* x, int64_t pairs, int64_t seq, int64_t heads, int64_t half,
                            const float* cos, const float* sin, float sign) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pairs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t per_row = heads * half;
    const int64_t r = p / per_row;
    const int64_t i = p % half;  // the pair within its head
    const int64_t t = r % seq;
    float* v = x + 2 * p;  // pairs are contiguous: row r, head h, pair i at 2·p
    const float c = cos[t * half + i];
    const float s = sign * sin[t * half + i];
    const float a0 = v[0];
    const float a1 = v[1];
    v[0] = a0 * c - a1 * s;
    v[1] = a0 * s + a1 * c;
  }
}

template <typename T>
__global__ void swiglu_forward_kernel(const T* gate, const T* up, int64_t count, float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float z = to_f32(gate[i]);
    y[i] = z / (1.0f + expf(-z)) * to_f32(up[i]);
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* gate, const T* up, const float* dy, int64_t count,
                                       float* dgate, float* dup) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float z = to_f32(gate[i]);
    const float e = expf(-z);
    const float s = 1.0f / (1.0f + e);
    // 1 − s = e · s, without the cancellation of 1 − s for large z.
    dgate[i] = dy[i] * to_f32(up[i]) * (s * (1.0f + z * (e * s)));
    dup[i] = dy[i] * z * s;
  }
}

// The launch just made, checked: a refused launch (its grid, block or
// shared memory), or an earlier kernel's fault surfacing here, throws.
void launched(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return;
  throw KernelError(std::string("CUDA kernel ") + kernel + " failed: " + cudaGetErrorName(err) +
                    ": " + cudaGetErrorString(err));
}

// Blocks get this much dynamic shared memory without asking.
constexpr size_t kDefaultSharedBytes = 48 * 1024;

// The most dynamic shared memory a block may have on the current device,
// once its kernel asks for it (allow_shared).
size_t shared_optin_bytes() {
  int device = 0;
  int bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess ||
      bytes <= 0) {
    (void)cudaGetLastError();
    return kDefaultSharedBytes;
  }
  return static_cast<size_t>(bytes);
}

// Lets `kernel` take `bytes` of dynamic shared memory beyond the default.
template <typename... Params>
void allow_shared(void (*kernel)(Params...), size_t bytes, const char* name) {
  if (bytes <= kDefaultSharedBytes) return;
  (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes));
  launched(name);
}

// An attention kernel's tile: its rows, the shared memory of a block, and
// the grid (one block per tile of each (example, head)).
struct AttentionTile {
  int64_t rows;
  size_t bytes;
  dim3 grid(const Attention& a, int64_t heads) const {
    return {static_cast<unsigned>(a.batch * heads),
            static_cast<unsigned>((a.seq + rows - 1) / rows)};
  }
};

// The widest tile whose block fits the device's shared memory: a power of
// two up to 32, no wider than the sequence needs.
AttentionTile attention_tile(const Attention& a, int64_t (*floats)(int64_t, int64_t),
                             const char* kernel) {
  const size_t limit = shared_optin_bytes();
  int64_t t = 32;
  while (t > 1 && t / 2 >= a.seq) t /= 2;
  for (; t >= 1; t /= 2) {
    const auto bytes = static_cast<size_t>(floats(t, a.dh)) * sizeof(float);
    if (bytes <= limit) return {t, bytes};
  }
  throw KernelError(std::string("CUDA kernel ") + kernel + ": a head of " + std::to_string(a.dh) +
                    " values needs " +
                    std::to_string(static_cast<size_t>(floats(1, a.dh)) * sizeof(float)) +
                    " bytes of shared memory per block even one row at a time; the device "
                    "allows " +
                    std::to_string(limit));
}

}  // namespace

void to_bf16(const float* in, void* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  to_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out),
                                                             count);
  launched("to_bf16");
}

void to_f16(const float* in, void* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  to_f16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(in, static_cast<__half*>(out), count);
  launched("to_f16");
}

void add_into(float* out, const float* a, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  add_into_kernel<<<blocks_for(count), kThreads, 0, stream>>>(out, a, count);
  launched("add_into");
}

void bias_residual(float* z, const float* b, const float* residual, int64_t rows, int64_t cols,
                   cudaStream_t stream) {
  const int64_t count = rows * cols;
  if (count == 0) return;
  bias_residual_kernel<<<blocks_for(count), kThreads, 0, stream>>>(z, b, residual, count, cols);
  launched("bias_residual");
}

void layernorm_forward(const float* x, const float* g, const float* b, int64_t rows, int64_t d,
                       float* y, float* mean, float* rstd, cudaStream_t stream) {
  if (rows == 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, g, b, d, y,
                                                                                 mean, rstd);
  launched("layernorm_forward");
}

void layernorm_backward_input(const float* x, const float* g, const float* mean, const float* rstd,
                              const float* dy, int64_t rows, int64_t d, float* dx, bool accumulate,
                              cudaStream_t stream) {
  if (rows == 0) return;
  layernorm_backward_input_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      x, g, mean, rstd, dy, d, dx, accumulate);
  launched("layernorm_backward_input");
}

void layernorm_backward_params(const float* x, const float* mean, const float* rstd,
                               const float* dy, int64_t rows, int64_t d, float* dg, float* db,
                               cudaStream_t stream) {
  if (d == 0) return;
  layernorm_backward_params_kernel<<<column_blocks(d), kColumnThreads, 0, stream>>>(
      x, mean, rstd, dy, rows, d, dg, db);
  launched("layernorm_backward_params");
}

void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, int64_t batch,
                       int64_t seq, int64_t d, VocabRange held, float* x, cudaStream_t stream) {
  const int64_t count = batch * seq * d;
  if (count == 0) return;
  embedding_forward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(tokens, wte, wpe, count, seq,
                                                                       d, held.lo, held.rows, x);
  launched("embedding_forward");
}

void embedding_backward(const TokenRowsView& rows, const float* dx, int64_t batch, int64_t seq,
                        int64_t d, VocabRange held, float* dwte, float* dwpe, cudaStream_t stream) {
  if (batch * seq * d == 0) return;
  if (rows.distinct > 0) {
    const int64_t blocks = rows.distinct < 65535 * 32 ? rows.distinct : 65535 * 32;
    embedding_backward_wte_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        rows, dx, d, held.lo, dwte);
    launched("embedding_backward_wte");
  }
  if (dwpe != nullptr) position_backward(dx, batch, seq, d, dwpe, stream);
}

void position_backward(const float* dx, int64_t batch, int64_t seq, int64_t d, float* dwpe,
                       cudaStream_t stream) {
  if (batch * seq * d == 0) return;
  embedding_backward_wpe_kernel<<<blocks_for(seq * d), kThreads, 0, stream>>>(dx, batch, seq, d,
                                                                              dwpe);
  launched("embedding_backward_wpe");
}

namespace {

// Launches an attention kernel (its parameters after the Attention and the
// tile's rows are `args`) over one block per tile of each (example, head
// of `heads`), tiles as wide as `floats`, its shared memory, allows.
template <typename... Params, typename... Args>
void launch_tiled(void (*kernel)(Attention, int64_t, Params...), const Attention& a, int64_t heads,
                  int64_t (*floats)(int64_t, int64_t), const char* name, cudaStream_t stream,
                  Args... args) {
  const AttentionTile tile = attention_tile(a, floats, name);
  allow_shared(kernel, tile.bytes, name);
  kernel<<<tile.grid(a, heads), kThreads, tile.bytes, stream>>>(a, tile.rows, args...);
  launched(name);
}

template <typename T>
void attention_forward_as(const Attention& a, void* out, float* lse, cudaStream_t stream) {
  launch_tiled(attention_forward_kernel<T>, a, a.heads, AttentionShared::forward,
               "attention_forward", stream, static_cast<T*>(out), lse);
}

template <typename T>
void attention_backward_as(const Attention& a, const void* out, const float* lse, const float* dout,
                           float* delta, float* dq, float* dk, float* dv, cudaStream_t stream) {
  launch_tiled(attention_dq_kernel<T>, a, a.heads, AttentionShared::dq, "attention_dq", stream,
               static_cast<const T*>(out), lse, dout, delta, dq);
  launch_tiled(attention_dkv_kernel<T>, a, a.kv_heads, AttentionShared::dkv, "attention_dkv",
               stream, lse, dout, delta, dk, dv);
}

}  // namespace

void attention_forward(const Attention& a, void* out, float* lse, cudaStream_t stream) {
  if (a.batch * a.seq * a.heads == 0) return;
  with_elem(a.elem, [&](auto type) { attention_forward_as<decltype(type)>(a, out, lse, stream); });
}

void attention_backward(const Attention& a, const void* out, const float* lse, const float* dout,
                        float* delta, float* dq, float* dk, float* dv, cudaStream_t stream) {
  if (a.batch * a.seq * a.heads == 0) return;
  with_elem(a.elem, [&](auto type) {
    attention_backward_as<decltype(type)>(a, out, lse, dout, delta, dq, dk, dv, stream);
  });
}

void rmsnorm_forward(const float* x, const float* g, int64_t rows, int64_t d, float eps, float* y,
                     float* rstd, cudaStream_t stream) {
  if (rows == 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, g, d, eps, y,
                                                                               rstd);
  launched("rmsnorm_forward");
}

void rmsnorm_backward_input(const float* x, const float* g, const float* rstd, const float* dy,
                            int64_t rows, int64_t d, float* dx, bool accumulate,
                            cudaStream_t stream) {
  if (rows == 0) return;
  rmsnorm_backward_input_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      x, g, rstd, dy, d, dx, accumulate);
  launched("rmsnorm_backward_input");
}

void rmsnorm_backward_params(const float* x, const float* rstd, const float* dy, int64_t rows,
                             int64_t d, float* dg, cudaStream_t stream) {
  if (d == 0) return;
  rmsnorm_backward_params_kernel<<<column_blocks(d), kColumnThreads, 0, stream>>>(x, rstd, dy, rows,
                                                                                  d, dg);
  launched("rmsnorm_backward_params");
}

void rope_apply(float* x, int64_t rows, int64_t seq, int64_t heads, int64_t hd, const float* cos,
                const float* sin, bool inverse, cudaStream_t stream) {
  const int64_t half = hd / 2;
  const int64_t pairs = rows * heads * half;
  if (pairs == 0) return;
  rope_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(x, pairs, seq, heads, half, cos, sin,
                                                          inverse ? -1.0f : 1.0f);
  launched("rope");
}

void swiglu_forward(const void* gate, const void* up, Elem elem, int64_t count, float* y,
                    cudaStream_t stream) {
  if (count == 0) return;
  with_elem(elem, [&](auto type) {
    using T = decltype(type);
    const auto kernel = swiglu_forward_kernel<T>;
    kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<const T*>(gate),
                                                       static_cast<const T*>(up), count, y);
  });
  launched("swiglu_forward");
}

void swiglu_backward(const void* gate, const void* up, Elem elem, const float* dy, int64_t count,
                     float* dgate, float* dup, cudaStream_t stream) {
  if (count == 0) return;
  with_elem(elem, [&](auto type) {
    using T = decltype(type);
    const auto kernel = swiglu_backward_kernel<T>;
    kernel<<<blocks_for(count), kThreads, 0, stream>>>(
        static_cast<const T*>(gate), static_cast<const T*>(up), dy, count, dgate, dup);
  });
  launched("swiglu_backward");
}

void bias_activation(float* z, const float* b, float* y, int64_t rows, int64_t cols, Act act,
                     cudaStream_t stream) {
  const int64_t count = rows * cols;
  if (count == 0) return;
  bias_activation_kernel<<<blocks_for(count), kThreads, 0, stream>>>(z, b, y, count, cols, act);
  launched("bias_activation");
}

void activation_backward(const float* z, const float* dy, float* dz, int64_t count, Act act,
                         cudaStream_t stream) {
  if (count == 0) return;
  activation_backward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(z, dy, dz, count, act);
  launched("activation_backward");
}

void column_sum_add(const float* m, int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  if (cols == 0) return;
  column_sum_add_kernel<<<column_blocks(cols), kColumnThreads, 0, stream>>>(m, rows, cols, out);
  launched("column_sum_add");
}

void softmax_xent(const float* logits, const int32_t* targets, int64_t rows, int64_t cols,
                  float* probs, double* row_loss, cudaStream_t stream) {
  if (rows == 0) return;
  softmax_xent_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, cols,
                                                                            probs, row_loss);
  launched("softmax_xent");
}

void sum_loss(const double* row_loss, int64_t rows, double scale, float* out, cudaStream_t stream) {
  sum_loss_kernel<<<1, kThreads, 0, stream>>>(row_loss, rows, scale, out);
  launched("sum_loss");
}

void row_max(const float* logits, int64_t rows, int64_t cols, float* mx, cudaStream_t stream) {
  if (rows == 0) return;
  row_max_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, cols, mx);
  launched("row_max");
}

void exp_sums(const float* logits, const int32_t* targets, int64_t rows, int64_t cols, int64_t lo,
              const float* mx, float* probs, float* sums, cudaStream_t stream) {
  if (rows == 0) return;
  exp_sums_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, rows, cols,
                                                                        lo, mx, probs, sums);
  launched("exp_sums");
}

void xent_normalize(float* probs, const float* sums, const float* mx, int64_t rows, int64_t cols,
                    double* row_loss, cudaStream_t stream) {
  if (rows == 0) return;
  xent_normalize_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(probs, sums, mx, cols,
                                                                              row_loss);
  launched("xent_normalize");
}

void xent_backward(const float* probs, const int32_t* targets, int64_t rows, int64_t cols,
                   int64_t lo, float scale, float* dlogits, cudaStream_t stream) {
  const int64_t count = rows * cols;
  if (count == 0) return;
  xent_backward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(probs, targets, count, cols, lo,
                                                                   scale, dlogits);
  launched("xent_backward");
}

}  // namespace tessera::model::cuda

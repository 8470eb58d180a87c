// The CUDA units' kernels (see device_kernels.hpp).
#include "device_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>

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

// One (example, query head) of the attention kernels: where its rows of
// q, k and v are, its rows in a [batch·seq, heads·dh] tensor (the output
// and its gradient), and its entry of a [batch, heads, seq] statistic.
// The model's query heads per key/value head.
__device__ int64_t group_of(const Attention& a) {
  return a.group > 0 ? a.group : a.heads / a.kv_heads;
}

struct HeadRows {
  Attention a;
  int64_t bh, row0, q_col, kv_col;
  __device__ HeadRows(const Attention& at, int64_t b, int64_t h)
      : a(at), bh(b * at.heads + h), row0(b * at.seq), q_col(h * at.dh) {
    kv_col = ((at.q_first + h) / group_of(at) - at.kv_first) * at.dh;
  }
  __device__ int64_t q_row(int64_t t) const { return (row0 + t) * a.q_stride + q_col; }
  __device__ int64_t kv_row(int64_t t) const { return (row0 + t) * a.kv_stride + kv_col; }
  __device__ const float* q(int64_t t) const { return a.q + q_row(t); }
  __device__ const float* k(int64_t t) const { return a.k + kv_row(t); }
  __device__ const float* v(int64_t t) const { return a.v + kv_row(t); }
  __device__ int64_t row(int64_t t) const { return (row0 + t) * a.heads * a.dh + q_col; }
  __device__ int64_t stat(int64_t t) const { return bh * a.seq + t; }
};

// The (example, query head) of a block of grid (seq, batch·heads).
__device__ HeadRows query_head(const Attention& a) {
  const int64_t b = blockIdx.y / a.heads;
  return HeadRows(a, b, blockIdx.y - b * a.heads);
}

// Attention: grid (seq, batch·heads), one block per query row i of one
// head; scores of keys 0..i in shared memory (seq floats), then q (dh).
__global__ void attention_forward_kernel(const Attention a, float* out, float* lse) {
  extern __shared__ float smem[];
  __shared__ float reduce[kThreads];
  const int64_t dh = a.dh;
  float* scores = smem;          // seq
  float* q = smem + a.seq;       // dh
  const int64_t i = blockIdx.x;  // query position
  const HeadRows at = query_head(a);
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) q[e] = at.q(i)[e];
  __syncthreads();
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const float* k = at.k(j);
    float s = 0.0f;
    for (int64_t e = 0; e < dh; ++e) s += q[e] * k[e];
    s *= a.scale;
    scores[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_max(mx, reduce);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const float p = expf(scores[j] - mx);
    scores[j] = p;
    sum += p;
  }
  sum = block_sum(sum, reduce);  // also orders the writes above before the reads below
  const float inv = 1.0f / sum;
  float* o = out + at.row(i);
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j <= i; ++j) acc += scores[j] * at.v(j)[e];
    o[e] = acc * inv;
  }
  if (threadIdx.x == 0) lse[at.stat(i)] = mx + logf(sum);
}

// delta[b, h, i] = dout_i · out_i (= Σ_j p_ij · dp_ij).
__global__ void attention_delta_kernel(const Attention a, const float* out, const float* dout,
                                       float* delta) {
  __shared__ float reduce[kThreads];
  const int64_t i = blockIdx.x;
  const HeadRows at = query_head(a);
  const int64_t r = at.row(i);
  float s = 0.0f;
  for (int64_t e = threadIdx.x; e < a.dh; e += blockDim.x) s += out[r + e] * dout[r + e];
  s = block_sum(s, reduce);
  if (threadIdx.x == 0) delta[at.stat(i)] = s;
}

// p_ij and ds_ij = p_ij (dp_ij - delta_i) of query i and key j, with
// dp_ij = dout_i · v_j.
struct ScoreGrad {
  float p;
  float ds;
};
__device__ ScoreGrad score_grad(const float* q, const float* k, const float* v, const float* go,
                                int64_t dh, float scale, float lse, float delta) {
  float s = 0.0f;
  float dp = 0.0f;
  for (int64_t e = 0; e < dh; ++e) {
    s += q[e] * k[e];
    dp += go[e] * v[e];
  }
  const float p = expf(s * scale - lse);
  return {p, p * (dp - delta)};
}

// dq_i = scale · Σ_{j<=i} ds_ij k_j; grid (seq, batch·heads).
__global__ void attention_dq_kernel(const Attention a, const float* lse, const float* dout,
                                    const float* delta, float* dq_out) {
  extern __shared__ float smem[];
  const int64_t dh = a.dh;
  float* ds = smem;         // seq
  float* q = smem + a.seq;  // dh
  float* go = q + dh;       // dh: dout_i
  const int64_t i = blockIdx.x;
  const HeadRows at = query_head(a);
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) {
    q[e] = at.q(i)[e];
    go[e] = dout[at.row(i) + e];
  }
  __syncthreads();
  const float l = lse[at.stat(i)];
  const float di = delta[at.stat(i)];
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    ds[j] = score_grad(q, at.k(j), at.v(j), go, dh, a.scale, l, di).ds;
  }
  __syncthreads();
  float* dq = dq_out + at.q_row(i);
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j <= i; ++j) acc += ds[j] * at.k(j)[e];
    dq[e] = acc * a.scale;
  }
}

// dk_j = scale · Σ_h Σ_{i>=j} ds^h_ij q^h_i ; dv_j = Σ_h Σ_{i>=j} p^h_ij
// dout^h_i, over the query heads h of key/value head g; grid (seq,
// batch·kv_heads), one block per key row j of one key/value head.
__global__ void attention_dkv_kernel(const Attention a, const float* lse, const float* dout,
                                     const float* delta, float* dk_out, float* dv_out) {
  extern __shared__ float smem[];
  const int64_t seq = a.seq;
  const int64_t dh = a.dh;
  const int64_t group = group_of(a);
  float* ds = smem;              // seq
  float* ps = smem + seq;        // seq
  float* k = ps + seq;           // dh
  float* v = k + dh;             // dh
  const int64_t j = blockIdx.x;  // key position
  const int64_t b = blockIdx.y / a.kv_heads;
  const int64_t g = blockIdx.y - b * a.kv_heads;
  // The query heads here that read key/value head g: [h0, h1).
  const int64_t model_g = g + a.kv_first;
  const int64_t h0 = model_g * group - a.q_first > 0 ? model_g * group - a.q_first : 0;
  const int64_t h1 =
      (model_g + 1) * group - a.q_first < a.heads ? (model_g + 1) * group - a.q_first : a.heads;
  const int64_t kv_row0 = (b * seq + j) * a.kv_stride + g * dh;
  float* dk = dk_out + kv_row0;
  float* dv = dv_out + kv_row0;
  if (h0 >= h1) {
    for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) {
      dk[e] = 0.0f;
      dv[e] = 0.0f;
    }
    return;
  }
  const HeadRows first(a, b, h0);
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) {
    k[e] = first.k(j)[e];
    v[e] = first.v(j)[e];
  }
  __syncthreads();
  for (int64_t m = 0; h0 + m < h1; ++m) {
    const HeadRows at(a, b, h0 + m);
    for (int64_t i = j + threadIdx.x; i < seq; i += blockDim.x) {
      const ScoreGrad s = score_grad(at.q(i), k, v, dout + at.row(i), dh, a.scale, lse[at.stat(i)],
                                     delta[at.stat(i)]);
      ps[i] = s.p;
      ds[i] = s.ds;
    }
    __syncthreads();
    // Each thread owns its elements e of dk and dv across the heads.
    for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) {
      float acc_k = 0.0f;
      float acc_v = 0.0f;
      for (int64_t i = j; i < seq; ++i) {
        acc_k += ds[i] * at.q(i)[e];
        acc_v += ps[i] * dout[at.row(i) + e];
      }
      dk[e] = m == 0 ? acc_k * a.scale : dk[e] + acc_k * a.scale;
      dv[e] = m == 0 ? acc_v : dv[e] + acc_v;
    }
    __syncthreads();  // the next head overwrites ps and ds
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

__global__ void swiglu_forward_kernel(const float* gate, const float* up, int64_t count, float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float z = gate[i];
    y[i] = z / (1.0f + expf(-z)) * up[i];
  }
}

__global__ void swiglu_backward_kernel(const float* gate, const float* up, const float* dy,
                                       int64_t count, float* dgate, float* dup) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float z = gate[i];
    const float e = expf(-z);
    const float s = 1.0f / (1.0f + e);
    // 1 − s = e · s, without the cancellation of 1 − s for large z.
    dgate[i] = dy[i] * up[i] * (s * (1.0f + z * (e * s)));
    dup[i] = dy[i] * z * s;
  }
}

}  // namespace

void to_bf16(const float* in, void* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  to_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out),
                                                             count);
}

void to_f16(const float* in, void* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  to_f16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(in, static_cast<__half*>(out), count);
}

void add_into(float* out, const float* a, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  add_into_kernel<<<blocks_for(count), kThreads, 0, stream>>>(out, a, count);
}

void bias_residual(float* z, const float* b, const float* residual, int64_t rows, int64_t cols,
                   cudaStream_t stream) {
  const int64_t count = rows * cols;
  if (count == 0) return;
  bias_residual_kernel<<<blocks_for(count), kThreads, 0, stream>>>(z, b, residual, count, cols);
}

void layernorm_forward(const float* x, const float* g, const float* b, int64_t rows, int64_t d,
                       float* y, float* mean, float* rstd, cudaStream_t stream) {
  if (rows == 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, g, b, d, y,
                                                                                 mean, rstd);
}

void layernorm_backward_input(const float* x, const float* g, const float* mean, const float* rstd,
                              const float* dy, int64_t rows, int64_t d, float* dx, bool accumulate,
                              cudaStream_t stream) {
  if (rows == 0) return;
  layernorm_backward_input_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      x, g, mean, rstd, dy, d, dx, accumulate);
}

void layernorm_backward_params(const float* x, const float* mean, const float* rstd,
                               const float* dy, int64_t rows, int64_t d, float* dg, float* db,
                               cudaStream_t stream) {
  if (d == 0) return;
  layernorm_backward_params_kernel<<<column_blocks(d), kColumnThreads, 0, stream>>>(
      x, mean, rstd, dy, rows, d, dg, db);
}

void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, int64_t batch,
                       int64_t seq, int64_t d, VocabRange held, float* x, cudaStream_t stream) {
  const int64_t count = batch * seq * d;
  if (count == 0) return;
  embedding_forward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(tokens, wte, wpe, count, seq,
                                                                       d, held.lo, held.rows, x);
}

void embedding_backward(const TokenRowsView& rows, const float* dx, int64_t batch, int64_t seq,
                        int64_t d, VocabRange held, float* dwte, float* dwpe, cudaStream_t stream) {
  if (batch * seq * d == 0) return;
  if (rows.distinct > 0) {
    const int64_t blocks = rows.distinct < 65535 * 32 ? rows.distinct : 65535 * 32;
    embedding_backward_wte_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        rows, dx, d, held.lo, dwte);
  }
  if (dwpe != nullptr) position_backward(dx, batch, seq, d, dwpe, stream);
}

void position_backward(const float* dx, int64_t batch, int64_t seq, int64_t d, float* dwpe,
                       cudaStream_t stream) {
  if (batch * seq * d == 0) return;
  embedding_backward_wpe_kernel<<<blocks_for(seq * d), kThreads, 0, stream>>>(dx, batch, seq, d,
                                                                              dwpe);
}

void attention_forward(const Attention& a, float* out, float* lse, cudaStream_t stream) {
  if (a.batch * a.seq * a.heads == 0) return;
  const dim3 grid(static_cast<unsigned>(a.seq), static_cast<unsigned>(a.batch * a.heads));
  const size_t shared = static_cast<size_t>(a.seq + a.dh) * sizeof(float);
  attention_forward_kernel<<<grid, kThreads, shared, stream>>>(a, out, lse);
}

void attention_backward(const Attention& a, const float* out, const float* lse, const float* dout,
                        float* delta, float* dq, float* dk, float* dv, cudaStream_t stream) {
  if (a.batch * a.seq * a.heads == 0) return;
  const dim3 grid(static_cast<unsigned>(a.seq), static_cast<unsigned>(a.batch * a.heads));
  attention_delta_kernel<<<grid, kThreads, 0, stream>>>(a, out, dout, delta);
  attention_dq_kernel<<<grid, kThreads, static_cast<size_t>(a.seq + 2 * a.dh) * sizeof(float),
                        stream>>>(a, lse, dout, delta, dq);
  const dim3 kv_grid(static_cast<unsigned>(a.seq), static_cast<unsigned>(a.batch * a.kv_heads));
  attention_dkv_kernel<<<kv_grid, kThreads,
                         static_cast<size_t>(2 * a.seq + 2 * a.dh) * sizeof(float), stream>>>(
      a, lse, dout, delta, dk, dv);
}

void rmsnorm_forward(const float* x, const float* g, int64_t rows, int64_t d, float eps, float* y,
                     float* rstd, cudaStream_t stream) {
  if (rows == 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, g, d, eps, y,
                                                                               rstd);
}

void rmsnorm_backward_input(const float* x, const float* g, const float* rstd, const float* dy,
                            int64_t rows, int64_t d, float* dx, bool accumulate,
                            cudaStream_t stream) {
  if (rows == 0) return;
  rmsnorm_backward_input_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      x, g, rstd, dy, d, dx, accumulate);
}

void rmsnorm_backward_params(const float* x, const float* rstd, const float* dy, int64_t rows,
                             int64_t d, float* dg, cudaStream_t stream) {
  if (d == 0) return;
  rmsnorm_backward_params_kernel<<<column_blocks(d), kColumnThreads, 0, stream>>>(x, rstd, dy, rows,
                                                                                  d, dg);
}

void rope_apply(float* x, int64_t rows, int64_t seq, int64_t heads, int64_t hd, const float* cos,
                const float* sin, bool inverse, cudaStream_t stream) {
  const int64_t half = hd / 2;
  const int64_t pairs = rows * heads * half;
  if (pairs == 0) return;
  rope_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(x, pairs, seq, heads, half, cos, sin,
                                                          inverse ? -1.0f : 1.0f);
}

void swiglu_forward(const float* gate, const float* up, int64_t count, float* y,
                    cudaStream_t stream) {
  if (count == 0) return;
  swiglu_forward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(gate, up, count, y);
}

void swiglu_backward(const float* gate, const float* up, const float* dy, int64_t count,
                     float* dgate, float* dup, cudaStream_t stream) {
  if (count == 0) return;
  swiglu_backward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(gate, up, dy, count, dgate,
                                                                     dup);
}

void bias_activation(float* z, const float* b, float* y, int64_t rows, int64_t cols, Act act,
                     cudaStream_t stream) {
  const int64_t count = rows * cols;
  if (count == 0) return;
  bias_activation_kernel<<<blocks_for(count), kThreads, 0, stream>>>(z, b, y, count, cols, act);
}

void activation_backward(const float* z, const float* dy, float* dz, int64_t count, Act act,
                         cudaStream_t stream) {
  if (count == 0) return;
  activation_backward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(z, dy, dz, count, act);
}

void column_sum_add(const float* m, int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  if (cols == 0) return;
  column_sum_add_kernel<<<column_blocks(cols), kColumnThreads, 0, stream>>>(m, rows, cols, out);
}

void softmax_xent(const float* logits, const int32_t* targets, int64_t rows, int64_t cols,
                  float* probs, double* row_loss, cudaStream_t stream) {
  if (rows == 0) return;
  softmax_xent_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, cols,
                                                                            probs, row_loss);
}

void sum_loss(const double* row_loss, int64_t rows, double scale, float* out, cudaStream_t stream) {
  sum_loss_kernel<<<1, kThreads, 0, stream>>>(row_loss, rows, scale, out);
}

void row_max(const float* logits, int64_t rows, int64_t cols, float* mx, cudaStream_t stream) {
  if (rows == 0) return;
  row_max_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, cols, mx);
}

void exp_sums(const float* logits, const int32_t* targets, int64_t rows, int64_t cols, int64_t lo,
              const float* mx, float* probs, float* sums, cudaStream_t stream) {
  if (rows == 0) return;
  exp_sums_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, rows, cols,
                                                                        lo, mx, probs, sums);
}

void xent_normalize(float* probs, const float* sums, const float* mx, int64_t rows, int64_t cols,
                    double* row_loss, cudaStream_t stream) {
  if (rows == 0) return;
  xent_normalize_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(probs, sums, mx, cols,
                                                                              row_loss);
}

void xent_backward(const float* probs, const int32_t* targets, int64_t rows, int64_t cols,
                   int64_t lo, float scale, float* dlogits, cudaStream_t stream) {
  const int64_t count = rows * cols;
  if (count == 0) return;
  xent_backward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(probs, targets, count, cols, lo,
                                                                   scale, dlogits);
}

}  // namespace tessera::model::cuda

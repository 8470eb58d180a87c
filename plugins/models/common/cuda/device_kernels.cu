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
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
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
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
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

__global__ void column_sum_add_kernel(const float* m, int64_t rows, int64_t cols, float* out) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= cols) return;
  float sum = 0.0f;
  for (int64_t r = 0; r < rows; ++r) sum += m[r * cols + j];
  out[j] += sum;
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
  shared[threadIdx.x] = mx;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  mx = shared[0];
  __syncthreads();
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float e = expf(in[j] - mx);
    out[j] = e;
    sum += e;
  }
  shared[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  sum = shared[0];
  const float target_logit = in[targets[r]];
  const float inv = 1.0f / sum;
  __syncthreads();  // every thread has read the logits (probs may alias them)
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) out[j] *= inv;
  if (threadIdx.x == 0) {
    row_loss[r] = log(static_cast<double>(sum)) + static_cast<double>(mx) - target_logit;
  }
}

__global__ void sum_loss_kernel(const double* row_loss, int64_t rows, double scale, float* out) {
  double sum = 0.0;
  for (int64_t r = 0; r < rows; ++r) sum += row_loss[r];
  *out = static_cast<float>(sum * scale);
}

__global__ void xent_backward_kernel(const float* probs, const int32_t* targets, int64_t count,
                                     int64_t cols, float scale, float* dlogits) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols;
    const int64_t j = i - r * cols;
    float v = probs[i] * scale;
    if (j == targets[r]) v -= scale;
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

// One thread per column, rows in order.
__global__ void layernorm_backward_params_kernel(const float* x, const float* mean,
                                                 const float* rstd, const float* dy, int64_t rows,
                                                 int64_t d, float* dg, float* db) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= d) return;
  float sg = 0.0f;
  float sb = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float grad = dy[r * d + j];
    sg += grad * (x[r * d + j] - mean[r]) * rstd[r];
    sb += grad;
  }
  dg[j] += sg;
  db[j] += sb;
}

__global__ void embedding_forward_kernel(const int32_t* tokens, const float* wte, const float* wpe,
                                         int64_t count, int64_t seq, int64_t d, float* x) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / d;
    const int64_t j = i - row * d;
    x[i] = wte[int64_t{tokens[row]} * d + j] + wpe[(row % seq) * d + j];
  }
}

__global__ void embedding_backward_wte_kernel(const int32_t* tokens, const float* dx, int64_t rows,
                                              int64_t d, float* dwte) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= d) return;
  for (int64_t r = 0; r < rows; ++r) dwte[int64_t{tokens[r]} * d + j] += dx[r * d + j];
}

__global__ void embedding_backward_wpe_kernel(const float* dx, int64_t batch, int64_t seq,
                                              int64_t d, float* dwpe) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= seq * d) return;
  float sum = 0.0f;
  for (int64_t b = 0; b < batch; ++b) sum += dx[b * seq * d + i];
  dwpe[i] += sum;
}

// Where one (example, head) of the attention kernels lives (blockIdx.y is
// example · heads + head): position t's q, k and v in the fused
// [batch·seq, 3·d] qkv, and the index of its row of this head in a
// [batch·seq, d] tensor (the output and its gradient) or in qkv.
struct HeadRows {
  int64_t bh, d, stride, col, row0;
  const float* base;
  __device__ HeadRows(const float* qkv, int64_t seq, int64_t heads, int64_t dh)
      : bh(blockIdx.y), d(heads * dh), stride(3 * heads * dh) {
    const int64_t b = bh / heads;
    col = (bh - b * heads) * dh;
    row0 = b * seq;
    base = qkv != nullptr ? qkv + row0 * stride : nullptr;
  }
  __device__ const float* q(int64_t t) const { return base + t * stride + col; }
  __device__ const float* k(int64_t t) const { return base + t * stride + d + col; }
  __device__ const float* v(int64_t t) const { return base + t * stride + 2 * d + col; }
  __device__ int64_t row(int64_t t) const { return (row0 + t) * d + col; }
  __device__ int64_t qkv_row(int64_t t) const { return (row0 + t) * stride + col; }
};

// Attention: grid (seq, batch·heads), one block per query row i of one
// head; scores of keys 0..i in shared memory (seq floats), then q (dh).
__global__ void attention_forward_kernel(const float* qkv, int64_t seq, int64_t heads, int64_t dh,
                                         float scale, float* out, float* lse) {
  extern __shared__ float smem[];
  __shared__ float reduce[kThreads];
  float* scores = smem;          // seq
  float* q = smem + seq;         // dh
  const int64_t i = blockIdx.x;  // query position
  const HeadRows at(qkv, seq, heads, dh);
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) q[e] = at.q(i)[e];
  __syncthreads();
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const float* k = at.k(j);
    float s = 0.0f;
    for (int64_t e = 0; e < dh; ++e) s += q[e] * k[e];
    s *= scale;
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
  if (threadIdx.x == 0) lse[at.bh * seq + i] = mx + logf(sum);
}

// delta[b, h, i] = dout_i · out_i (= Σ_j p_ij · dp_ij).
__global__ void attention_delta_kernel(const float* out, const float* dout, int64_t seq,
                                       int64_t heads, int64_t dh, float* delta) {
  __shared__ float reduce[kThreads];
  const int64_t i = blockIdx.x;
  const HeadRows at(nullptr, seq, heads, dh);
  const int64_t r = at.row(i);
  float s = 0.0f;
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) s += out[r + e] * dout[r + e];
  s = block_sum(s, reduce);
  if (threadIdx.x == 0) delta[at.bh * seq + i] = s;
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

// dq_i = scale · Σ_{j<=i} ds_ij k_j.
__global__ void attention_dq_kernel(const float* qkv, const float* lse, const float* dout,
                                    const float* delta, int64_t seq, int64_t heads, int64_t dh,
                                    float scale, float* dqkv) {
  extern __shared__ float smem[];
  float* ds = smem;       // seq
  float* q = smem + seq;  // dh
  float* go = q + dh;     // dh: dout_i
  const int64_t i = blockIdx.x;
  const HeadRows at(qkv, seq, heads, dh);
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) {
    q[e] = at.q(i)[e];
    go[e] = dout[at.row(i) + e];
  }
  __syncthreads();
  const float l = lse[at.bh * seq + i];
  const float di = delta[at.bh * seq + i];
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    ds[j] = score_grad(q, at.k(j), at.v(j), go, dh, scale, l, di).ds;
  }
  __syncthreads();
  float* dq = dqkv + at.qkv_row(i);
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j <= i; ++j) acc += ds[j] * at.k(j)[e];
    dq[e] = acc * scale;
  }
}

// dk_j = scale · Σ_{i>=j} ds_ij q_i ; dv_j = Σ_{i>=j} p_ij dout_i.
__global__ void attention_dkv_kernel(const float* qkv, const float* lse, const float* dout,
                                     const float* delta, int64_t seq, int64_t heads, int64_t dh,
                                     float scale, float* dqkv) {
  extern __shared__ float smem[];
  float* ds = smem;              // seq
  float* ps = smem + seq;        // seq
  float* k = ps + seq;           // dh
  float* v = k + dh;             // dh
  const int64_t j = blockIdx.x;  // key position
  const HeadRows at(qkv, seq, heads, dh);
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) {
    k[e] = at.k(j)[e];
    v[e] = at.v(j)[e];
  }
  __syncthreads();
  for (int64_t i = j + threadIdx.x; i < seq; i += blockDim.x) {
    const ScoreGrad g = score_grad(at.q(i), k, v, dout + at.row(i), dh, scale, lse[at.bh * seq + i],
                                   delta[at.bh * seq + i]);
    ps[i] = g.p;
    ds[i] = g.ds;
  }
  __syncthreads();
  float* dk = dqkv + at.qkv_row(j) + at.d;
  float* dv = dk + at.d;
  for (int64_t e = threadIdx.x; e < dh; e += blockDim.x) {
    float acc_k = 0.0f;
    float acc_v = 0.0f;
    for (int64_t i = j; i < seq; ++i) {
      acc_k += ds[i] * at.q(i)[e];
      acc_v += ps[i] * dout[at.row(i) + e];
    }
    dk[e] = acc_k * scale;
    dv[e] = acc_v;
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
  layernorm_backward_params_kernel<<<blocks_for(d), kThreads, 0, stream>>>(x, mean, rstd, dy, rows,
                                                                           d, dg, db);
}

void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, int64_t batch,
                       int64_t seq, int64_t d, float* x, cudaStream_t stream) {
  const int64_t count = batch * seq * d;
  if (count == 0) return;
  embedding_forward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(tokens, wte, wpe, count, seq,
                                                                       d, x);
}

void embedding_backward(const int32_t* tokens, const float* dx, int64_t batch, int64_t seq,
                        int64_t d, float* dwte, float* dwpe, cudaStream_t stream) {
  if (batch * seq * d == 0) return;
  embedding_backward_wte_kernel<<<blocks_for(d), kThreads, 0, stream>>>(tokens, dx, batch * seq, d,
                                                                        dwte);
  embedding_backward_wpe_kernel<<<blocks_for(seq * d), kThreads, 0, stream>>>(dx, batch, seq, d,
                                                                              dwpe);
}

void attention_forward(const float* qkv, int64_t batch, int64_t seq, int64_t heads, int64_t dh,
                       float scale, float* out, float* lse, cudaStream_t stream) {
  if (batch * seq * heads == 0) return;
  const dim3 grid(static_cast<unsigned>(seq), static_cast<unsigned>(batch * heads));
  const size_t shared = static_cast<size_t>(seq + dh) * sizeof(float);
  attention_forward_kernel<<<grid, kThreads, shared, stream>>>(qkv, seq, heads, dh, scale, out,
                                                               lse);
}

void attention_backward(const float* qkv, const float* out, const float* lse, const float* dout,
                        int64_t batch, int64_t seq, int64_t heads, int64_t dh, float scale,
                        float* delta, float* dqkv, cudaStream_t stream) {
  if (batch * seq * heads == 0) return;
  const dim3 grid(static_cast<unsigned>(seq), static_cast<unsigned>(batch * heads));
  attention_delta_kernel<<<grid, kThreads, 0, stream>>>(out, dout, seq, heads, dh, delta);
  attention_dq_kernel<<<grid, kThreads, static_cast<size_t>(seq + 2 * dh) * sizeof(float),
                        stream>>>(qkv, lse, dout, delta, seq, heads, dh, scale, dqkv);
  attention_dkv_kernel<<<grid, kThreads, static_cast<size_t>(2 * seq + 2 * dh) * sizeof(float),
                         stream>>>(qkv, lse, dout, delta, seq, heads, dh, scale, dqkv);
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
  column_sum_add_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(m, rows, cols, out);
}

void softmax_xent(const float* logits, const int32_t* targets, int64_t rows, int64_t cols,
                  float* probs, double* row_loss, cudaStream_t stream) {
  if (rows == 0) return;
  softmax_xent_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, cols,
                                                                            probs, row_loss);
}

void sum_loss(const double* row_loss, int64_t rows, double scale, float* out, cudaStream_t stream) {
  sum_loss_kernel<<<1, 1, 0, stream>>>(row_loss, rows, scale, out);
}

void xent_backward(const float* probs, const int32_t* targets, int64_t rows, int64_t cols,
                   float scale, float* dlogits, cudaStream_t stream) {
  const int64_t count = rows * cols;
  if (count == 0) return;
  xent_backward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(probs, targets, count, cols,
                                                                   scale, dlogits);
}

}  // namespace tessera::model::cuda

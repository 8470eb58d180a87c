// Numeric building blocks of the reference models (see kernels.hpp).
#include "tessera/models/kernels.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>

#include "tessera/models/fast_math.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/intra_op.hpp"
#include "tessera/sdk/rng.hpp"

// The element-wise kernels are also compiled for AVX2 (picked at load time
// where the CPU has it): twice the lanes of the x86-64 baseline. AVX2 alone
// enables no FMA, and every sum below has its order written out, so both
// versions give the same bits. Not under the sanitizers: the clones' ifunc
// resolvers run during relocation, before a sanitizer's runtime is set up
// (ThreadSanitizer crashes there).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TESSERA_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TESSERA_SANITIZED 1
#endif
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TESSERA_SANITIZED)
#define TESSERA_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#define TESSERA_ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define TESSERA_VECTOR_CLONES
#define TESSERA_ALWAYS_INLINE inline
#endif

namespace tessera::model::kernels {
namespace {

// One OpenBLAS thread: ranks are threads already, and a fixed thread count
// keeps every product's summation order the same run to run.
void pin_blas_threads() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// A GEMM below this many multiply-adds (m·n·k) runs on one thread: the
// hand-off to the rank's other threads costs more than it saves.
constexpr int64_t kParallelGemmFlops = int64_t{1} << 18;
// Split granularity in rows: a multiple of every x86-64 sgemm kernel's
// row tile (see gemm).
constexpr int64_t kGemmRowBlock = 96;

// Element-wise passes split over the rank's threads in pieces of whole
// 64-element groups, at least kMinElementChunk elements each: fn(first,
// count) on each piece. Element-wise results do not depend on where a
// piece starts.
constexpr int64_t kElementGroup = 64;
constexpr int64_t kMinElementChunk = int64_t{1} << 14;

template <typename Fn>
void split_elements(int64_t count, Fn&& fn) {
  const int64_t groups = (count + kElementGroup - 1) / kElementGroup;
  sdk::intra_op::parallel_for(groups, kMinElementChunk / kElementGroup,
                              [&](int64_t first, int64_t last) {
                                const int64_t i = first * kElementGroup;
                                fn(i, std::min(last * kElementGroup, count) - i);
                              });
}

constexpr float kLnEps = 1e-5f;
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

uint64_t fnv1a(std::string_view text, uint64_t h) {
  for (const char ch : text) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001B3ULL;
  }
  return h;
}

// Reductions (in float, or in double where asked) with a fixed summation
// order: lane l (of kLanes) adds the terms l, l + kLanes, l + 2·kLanes, ...
// and the lanes are then added pairwise. The order is written out in the source, so the result is
// the same whether the compiler vectorises the lanes or not (it never has
// to reorder a sum), and the lanes keep the rounding error of a 128-term
// row sum near that of 16-term sums.
constexpr int64_t kLanes = 8;

template <typename Acc>
TESSERA_ALWAYS_INLINE Acc combine_lanes(const Acc* acc) {
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// Σ_{j < n} term(j) in the lane order above, accumulated in Acc.
template <typename Acc = float, typename Term>
TESSERA_ALWAYS_INLINE Acc lane_sum(int64_t n, Term term) {
  Acc acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += term(j + l);
  }
  for (int64_t l = 0; j + l < n; ++l) acc[l] += term(j + l);
  return combine_lanes(acc);
}

// max_{j < n} x[j] (n >= 1); exact, so any order gives the same value.
TESSERA_ALWAYS_INLINE float row_max(const float* x, int64_t n) {
  float acc[kLanes];
  for (float& a : acc) a = x[0];
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) acc[l] = std::max(acc[l], x[j + l]);
  }
  for (int64_t l = 0; j + l < n; ++l) acc[l] = std::max(acc[l], x[j + l]);
  float m = acc[0];
  for (int64_t l = 1; l < kLanes; ++l) m = std::max(m, acc[l]);
  return m;
}

// p[j] = exp(x[j] − max) / Σ exp(x[k] − max) over j < n (p may be x);
// returns the sum (before the division) and sets `mx` to the maximum.
TESSERA_ALWAYS_INLINE float softmax_row(const float* x, int64_t n, float* p, float& mx) {
  mx = row_max(x, n);
  const float m = mx;
  // In place or between distinct rows, each through restrict pointers (a
  // loop that may partly overlap would run scalar after the overlap check).
  float* __restrict out = p;
  if (x == p) {
    for (int64_t j = 0; j < n; ++j) out[j] = exp_approx(out[j] - m);
  } else {
    const float* __restrict in = x;
    for (int64_t j = 0; j < n; ++j) out[j] = exp_approx(in[j] - m);
  }
  const float sum = lane_sum(n, [out](int64_t j) { return out[j]; });
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) out[j] *= inv;
  return sum;
}

// dst[j] += Σ_r src[r · cols + j] over `rows` rows, each column summed row
// after row in order (as a row-by-row loop would). Rows in blocks of
// kSumRows read side by side, so dst is loaded and stored once per block
// rather than once per row and src is still read front to back.
TESSERA_VECTOR_CLONES void add_column_sums(const float* src, int64_t rows, int64_t cols,
                                           float* dst) {
  constexpr int64_t kSumRows = 8;
  float* __restrict out = dst;
  int64_t r = 0;
  for (; r + kSumRows <= rows; r += kSumRows) {
    const float* __restrict block = src + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      float acc = out[j];
      for (int64_t l = 0; l < kSumRows; ++l) acc += block[l * cols + j];
      out[j] = acc;
    }
  }
  for (; r < rows; ++r) {
    const float* __restrict row = src + r * cols;
    for (int64_t j = 0; j < cols; ++j) out[j] += row[j];
  }
}

// C = alpha · op(A) · op(B) + beta · C, split over the rank's threads by
// blocks of whole output rows; prepare(r0, r1) runs on C's rows [r0, r1)
// in the same chunk just before their product (zeroing them, writing a
// bias), so those rows are still in cache. Each element of C is one dot
// product over all of k, and with block starts at multiples of the
// micro-kernel's row tile (OpenBLAS's N unroll of its column-major view: 4,
// 8, 16 or 24 on the x86-64 kernels) every row lands in the same kind of
// tile as in the unsplit product, so the bits do not depend on the thread
// count. Columns are never split: their tiles follow OpenBLAS's own
// blocking, which a split would change.
template <typename Prepare>
void gemm_rows(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc, Prepare&& prepare) {
  pin_blas_threads();
  if (m == 0 || n == 0) return;
  const auto rows = [&](int64_t r0, int64_t r1) {
    prepare(r0, r1);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(r1 - r0),
                static_cast<blasint>(n), static_cast<blasint>(k), alpha,
                trans_a ? a + r0 : a + r0 * lda, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), beta, c + r0 * ldc, static_cast<blasint>(ldc));
  };
  const int64_t blocks = (m + kGemmRowBlock - 1) / kGemmRowBlock;
  if (sdk::intra_op::threads() == 1 || blocks < 2 || m * n * k < kParallelGemmFlops) {
    rows(0, m);
    return;
  }
  sdk::intra_op::parallel_for(blocks, 1, [&](int64_t first, int64_t last) {
    rows(first * kGemmRowBlock, std::min(last * kGemmRowBlock, m));
  });
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_rows(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
            [](int64_t, int64_t) {});
}

void gemm_overwrite(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                    int64_t ldc) {
  gemm_rows(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 1.0f, c, ldc,
            [&](int64_t r0, int64_t r1) {
              if (ldc == n) {
                std::fill(c + r0 * n, c + r1 * n, 0.0f);
              } else {
                for (int64_t r = r0; r < r1; ++r) std::fill(c + r * ldc, c + r * ldc + n, 0.0f);
              }
            });
}

void linear_forward(const float* x, const float* w, const float* bias, int64_t n, int64_t in,
                    int64_t out, float* y) {
  if (bias == nullptr) {
    gemm_overwrite(false, false, n, out, in, 1.0f, x, in, w, out, y, out);
    return;
  }
  gemm_rows(false, false, n, out, in, 1.0f, x, in, w, out, 1.0f, y, out,
            [&](int64_t r0, int64_t r1) {
              for (int64_t r = r0; r < r1; ++r) std::copy(bias, bias + out, y + r * out);
            });
}

TESSERA_VECTOR_CLONES void linear_forward_residual(const float* x, const float* w,
                                                   const float* bias, const float* residual,
                                                   int64_t n, int64_t in, int64_t out, float* y) {
  float* __restrict dst = y;
  for (int64_t r = 0; r < n; ++r) {
    const float* __restrict res = residual + r * out;
    float* __restrict row = dst + r * out;
    for (int64_t j = 0; j < out; ++j) row[j] = res[j] + bias[j];
  }
  gemm(false, false, n, out, in, 1.0f, x, in, w, out, 1.0f, y, out);
}

void linear_backward(const float* x, const float* w, const float* dy, int64_t n, int64_t in,
                     int64_t out, float* dw, float* dbias, float* dx) {
  linear_backward_weight(x, dy, n, in, out, dw, dbias);
  if (dx != nullptr) linear_backward_input(w, dy, n, in, out, dx);
}

void linear_backward_input(const float* w, const float* dy, int64_t n, int64_t in, int64_t out,
                           float* dx, bool accumulate) {
  if (accumulate) {
    gemm(false, true, n, in, out, 1.0f, dy, out, w, out, 1.0f, dx, in);
  } else {
    gemm_overwrite(false, true, n, in, out, 1.0f, dy, out, w, out, dx, in);
  }
}

void linear_backward_weight(const float* x, const float* dy, int64_t n, int64_t in, int64_t out,
                            float* dw, float* dbias) {
  gemm(true, false, in, out, n, 1.0f, x, in, dy, out, 1.0f, dw, out);
  if (dbias != nullptr) add_column_sums(dy, n, out, dbias);
}

TESSERA_VECTOR_CLONES void add_into(float* dst, const float* src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] += src[i];
}

namespace {

TESSERA_VECTOR_CLONES void multiply_range(const float* a, const float* b, int64_t count,
                                          float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] * b[i];
}

}  // namespace

void multiply(const float* a, const float* b, int64_t count, float* out) {
  split_elements(count, [&](int64_t i, int64_t n) { multiply_range(a + i, b + i, n, out + i); });
}

TESSERA_VECTOR_CLONES void layernorm_forward(const float* x, const float* g, const float* b,
                                             int64_t n, int64_t d, float* y, float* mean,
                                             float* rstd) {
  const auto dd = static_cast<double>(d);
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    const double mu = lane_sum<double>(d, [xr](int64_t j) { return xr[j]; }) / dd;
    const double var = lane_sum<double>(d,
                                        [xr, mu](int64_t j) {
                                          const double c = xr[j] - mu;
                                          return c * c;
                                        }) /
                       dd;
    const auto rs = static_cast<float>(1.0 / std::sqrt(var + kLnEps));
    const auto m = static_cast<float>(mu);
    mean[r] = m;
    rstd[r] = rs;
    float* __restrict yr = y + r * d;
    for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - m) * rs * g[j] + b[j];
  }
}

TESSERA_VECTOR_CLONES void layernorm_backward(const float* x, const float* g, const float* mean,
                                              const float* rstd, const float* dy, int64_t n,
                                              int64_t d, float* dx, float* dg, float* db) {
  const auto dd = static_cast<double>(d);
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    const float m = mean[r];
    const float rs = rstd[r];
    // xhat = (x - m) rs; dxhat = dy g; dx = rs (dxhat - mean(dxhat) - xhat mean(dxhat xhat)).
    const auto mean_dxhat =
        static_cast<float>(lane_sum<double>(d, [dyr, g](int64_t j) { return dyr[j] * g[j]; }) / dd);
    const auto mean_dxhat_xhat = static_cast<float>(
        lane_sum<double>(d,
                         [xr, dyr, g, m, rs](int64_t j) {
                           return static_cast<double>(dyr[j] * g[j]) * ((xr[j] - m) * rs);
                         }) /
        dd);
    // Separate loops over restrict pointers: one store stream each, so the
    // compiler vectorises them without checks for overlap.
    float* __restrict dxr = dx + r * d;
    for (int64_t j = 0; j < d; ++j) {
      const float xhat = (xr[j] - m) * rs;
      dxr[j] += rs * (dyr[j] * g[j] - mean_dxhat - xhat * mean_dxhat_xhat);
    }
    float* __restrict dgr = dg;
    for (int64_t j = 0; j < d; ++j) dgr[j] += dyr[j] * ((xr[j] - m) * rs);
    float* __restrict dbr = db;
    for (int64_t j = 0; j < d; ++j) dbr[j] += dyr[j];
  }
}

void rmsnorm_forward(const float* x, const float* g, int64_t n, int64_t d, float eps, float* y,
                     float* rstd) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    double sq = 0.0;
    for (int64_t j = 0; j < d; ++j) sq += static_cast<double>(xr[j]) * xr[j];
    const auto rs = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(d) + eps));
    rstd[r] = rs;
    float* yr = y + r * d;
    for (int64_t j = 0; j < d; ++j) yr[j] = xr[j] * rs * g[j];
  }
}

void rmsnorm_backward(const float* x, const float* g, const float* rstd, const float* dy, int64_t n,
                      int64_t d, float* dx, float* dg) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    const float rs = rstd[r];
    double sum_dxhat_xhat = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const float xhat = xr[j] * rs;
      sum_dxhat_xhat += static_cast<double>(dyr[j] * g[j]) * xhat;
      dg[j] += dyr[j] * xhat;
    }
    const auto mean_dxhat_xhat = static_cast<float>(sum_dxhat_xhat / static_cast<double>(d));
    float* dxr = dx + r * d;
    for (int64_t j = 0; j < d; ++j) {
      const float xhat = xr[j] * rs;
      dxr[j] += rs * (dyr[j] * g[j] - xhat * mean_dxhat_xhat);
    }
  }
}

TESSERA_VECTOR_CLONES void swiglu_forward(const float* gate, const float* up, int64_t count,
                                          float* y) {
  const float* __restrict a = gate;
  const float* __restrict b = up;
  float* __restrict out = y;
  for (int64_t i = 0; i < count; ++i) {
    const float z = a[i];
    out[i] = z / (1.0f + exp_approx(-z)) * b[i];
  }
}

TESSERA_VECTOR_CLONES void swiglu_backward(const float* gate, const float* up, const float* dy,
                                           int64_t count, float* dgate, float* dup) {
  const float* __restrict a = gate;
  const float* __restrict b = up;
  const float* __restrict grad_out = dy;
  float* __restrict da = dgate;
  float* __restrict db = dup;
  for (int64_t i = 0; i < count; ++i) {
    const float z = a[i];
    const float e = exp_approx(-z);
    const float s = 1.0f / (1.0f + e);
    const float silu = z * s;
    // 1 − s = e · s, without the cancellation of 1 − s for large z.
    da[i] = grad_out[i] * b[i] * (s * (1.0f + z * (e * s)));
    db[i] = grad_out[i] * silu;
  }
}

void rope_tables(int64_t seq_len, int64_t head_dim, double theta, float* cos, float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < seq_len; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double freq =
          std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      const double angle = static_cast<double>(t) * freq;
      cos[t * half + i] = static_cast<float>(std::cos(angle));
      sin[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope_apply(float* x, int64_t rows, int64_t seq, int64_t heads, int64_t head_dim,
                const float* cos, const float* sin, bool inverse) {
  const int64_t half = head_dim / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % seq;
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    float* row = x + r * heads * head_dim;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = row + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[2 * i];
        const float b = v[2 * i + 1];
        const float si = sign * s[i];
        v[2 * i] = a * c[i] - b * si;
        v[2 * i + 1] = a * si + b * c[i];
      }
    }
  }
}

TESSERA_VECTOR_CLONES void activation_forward(Activation act, const float* z, int64_t count,
                                              float* y) {
  if (act == Activation::relu) {
    for (int64_t i = 0; i < count; ++i) y[i] = z[i] > 0.0f ? z[i] : 0.0f;
    return;
  }
  const float* __restrict in = z;
  float* __restrict out = y;
  for (int64_t i = 0; i < count; ++i) {
    const float u = in[i];
    out[i] = 0.5f * u * (1.0f + tanh_approx(kGeluC * (u + kGeluA * u * u * u)));
  }
}

TESSERA_VECTOR_CLONES void activation_backward(Activation act, const float* z, const float* dy,
                                               int64_t count, float* dz) {
  if (act == Activation::relu) {
    for (int64_t i = 0; i < count; ++i) dz[i] = z[i] > 0.0f ? dy[i] : 0.0f;
    return;
  }
  const float* __restrict in = z;
  const float* __restrict grad_out = dy;
  float* __restrict grad_in = dz;
  for (int64_t i = 0; i < count; ++i) {
    const float u = in[i];
    const float t = tanh_approx(kGeluC * (u + kGeluA * u * u * u));
    const float dt = (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * u * u);
    grad_in[i] = grad_out[i] * (0.5f * (1.0f + t) + 0.5f * u * dt);
  }
}

namespace {

TESSERA_VECTOR_CLONES void gelu_keep_range(float* z, int64_t count, float* y) {
  float* __restrict zd = z;
  float* __restrict out = y;
  for (int64_t i = 0; i < count; ++i) {
    const float u = zd[i];
    const float t = tanh_approx(kGeluC * (u + kGeluA * u * u * u));
    const float dt = (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * u * u);
    out[i] = 0.5f * u * (1.0f + t);
    zd[i] = 0.5f * (1.0f + t) + 0.5f * u * dt;
  }
}

}  // namespace

void gelu_forward_keep_derivative(float* z, int64_t count, float* y) {
  split_elements(count, [&](int64_t i, int64_t n) { gelu_keep_range(z + i, n, y + i); });
}

TESSERA_VECTOR_CLONES void causal_softmax_forward(float* p, int64_t seq) {
  for (int64_t i = 0; i < seq; ++i) {
    float* __restrict row = p + i * seq;
    const float m = row_max(row, i + 1);
    // The exponentials run over whole lanes (up to the next multiple of
    // kLanes within the row) so no scalar tail is left; the masked ones are
    // set to 0 before the sum, which adding zeros leaves as the lane sum of
    // the i + 1 unmasked values.
    const int64_t padded = std::min(seq, (i + kLanes) / kLanes * kLanes);
    for (int64_t j = 0; j < padded; ++j) row[j] = exp_approx(row[j] - m);
    std::fill(row + i + 1, row + seq, 0.0f);
    const float sum = lane_sum(padded, [row](int64_t j) { return row[j]; });
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < padded; ++j) row[j] *= inv;
  }
}

TESSERA_VECTOR_CLONES void causal_softmax_backward(const float* p, int64_t seq, float* dp) {
  for (int64_t i = 0; i < seq; ++i) {
    const float* prow = p + i * seq;
    float* __restrict drow = dp + i * seq;
    const float dot = lane_sum(i + 1, [prow, drow](int64_t j) { return drow[j] * prow[j]; });
    for (int64_t j = 0; j < seq; ++j) drow[j] = prow[j] * (drow[j] - dot);
  }
}

TESSERA_VECTOR_CLONES double softmax_xent_forward(const float* logits, const int32_t* targets,
                                                  int64_t n, int64_t c, float* probs,
                                                  std::string_view where) {
  double loss = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    const int32_t t = targets[r];
    if (t < 0 || t >= c) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat(where, ": target ", t, " of row ", r, " is outside [0, ", c, ")"));
    }
    const float* lr = logits + r * c;
    float* pr = probs + r * c;
    const float target_logit = lr[t];  // read first: probs may alias logits
    float mx = 0.0f;
    const float sum = softmax_row(lr, c, pr, mx);
    loss += std::log(static_cast<double>(sum)) + mx - target_logit;
  }
  return loss;
}

void softmax_xent_backward(const float* probs, const int32_t* targets, int64_t n, int64_t c,
                           float scale, float* dlogits) {
  for (int64_t r = 0; r < n; ++r) {
    const float* pr = probs + r * c;
    float* dr = dlogits + r * c;
    for (int64_t j = 0; j < c; ++j) dr[j] = pr[j] * scale;
    dr[targets[r]] -= scale;
  }
}

void fill_normal(std::span<float> out, float std, uint64_t seed, std::string_view unit,
                 std::string_view param) {
  uint64_t key = fnv1a(unit, 0xCBF29CE484222325ULL);
  key = fnv1a(".", key);
  key = fnv1a(param, key);
  KeyedRng rng(splitmix64(seed) ^ key);
  for (float& v : out) v = static_cast<float>(rng.normal()) * std;
}

void check_count(std::string_view unit, std::string_view what, std::size_t count,
                 std::size_t expected) {
  if (count != expected) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("unit '", unit, "': expected ", expected, " ", what,
                               " pointers, got ", count));
  }
}

void init_by_convention(std::string_view unit, std::span<const ParamSpec> specs,
                        std::span<float* const> params, uint64_t seed) {
  check_count(unit, "parameter", params.size(), specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& spec = specs[i];
    if (!spec.tied_to.empty()) continue;
    std::span<float> out(params[i], static_cast<std::size_t>(spec.numel()));
    const std::string_view name = spec.name;
    if (name.ends_with("_g")) {
      std::fill(out.begin(), out.end(), 1.0f);
    } else if (name == "b" || name.ends_with("_b")) {
      std::fill(out.begin(), out.end(), 0.0f);
    } else {
      fill_normal(out, 0.02f, seed, unit, name);
    }
  }
}

}  // namespace tessera::model::kernels

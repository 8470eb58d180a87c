// The `powersgd` compressor plugin (COLLECTIVE): rank-r power iteration per
// gradient matrix (Vogels et al., 2019), with error feedback and warm-started
// Q factors. Per bucket, every reduce makes three allreduces at most: the
// entries that are not compressed (vectors, small matrices, gaps) in one f32
// buffer, then the P factors of all matrices, then their Q factors.
//
// With SUM semantics (each rank's gradient is its share, the true gradient
// is the sum), for a matrix M_i of rank i and the shared Q:
//   P   = sum_i M_i Q            (allreduce), orthonormalised to P^
//   Q_i = M_i^T P^,  Q = sum_i Q_i (allreduce)
//   result = P^ Q^T = P^ P^T (sum_i M_i), the same on every rank
//   residual_i = M_i - P^ Q_i^T  (error feedback)
// The residuals add up over the ranks to sum_i M_i - result, the error of
// the step, as with PyTorch's M_i - result / N; each rank's part is the
// component of its own M_i outside span(P^) and does not depend on the
// other ranks' gradients.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "compress_support.hpp"
#include "tessera/c/host.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/compressor.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::compressors {
namespace {

constexpr tessera_option_decl kPowerSgdOptions[] = {
    {"rank", TESSERA_OPT_INT, "4", "rank r of each matrix's approximation, in [1, 4096]"},
    {"warm_start", TESSERA_OPT_BOOL, "true",
     "start each step's power iteration from the previous step's Q (false: a fresh random Q)"},
    {"error_feedback", TESSERA_OPT_BOOL, "true",
     "keep what the approximation lost and add it to the next step's gradients"},
    {"min_compression", TESSERA_OPT_FLOAT, "1.0",
     "a rows x cols matrix is compressed only when rows * cols > min_compression * (rows + "
     "cols) * r (>= 0; 0: every matrix)"},
    {"seed", TESSERA_OPT_INT, "0", "seed of the random Q factors (the same on every rank)"},
};

struct PowerSgdConfig {
  int64_t rank = 4;
  bool warm_start = true;
  bool error_feedback = true;
  double min_compression = 1.0;
  uint64_t seed = 0;
};

// A matrix of the bucket that is compressed.
struct Matrix {
  uint64_t offset;    // in the bucket
  uint64_t rows;      // n
  uint64_t cols;      // m
  uint64_t r;         // min(rank, n, m)
  uint64_t position;  // of its tensor in the bucket's list (the random Q's key)
  uint64_t p_at;      // offset of its n x r factor in the P buffer
  uint64_t q_at;      // offset of its m x r factor in the Q buffer
  uint64_t residual_at;
  bool fresh = true;  // Q must be drawn before the next step
};

// A range of the bucket reduced without compression.
struct Plain {
  uint64_t offset;
  uint64_t count;
};

// Gram-Schmidt on the columns of an n x r row-major matrix, in double; a
// column with no norm left (a vanishing gradient) becomes zero instead of
// dividing by zero.
void orthonormalise(double* a, uint64_t n, uint64_t r) {
  for (uint64_t c = 0; c < r; ++c) {
    double norm2 = 0.0;
    for (uint64_t i = 0; i < n; ++i) norm2 += a[i * r + c] * a[i * r + c];
    const double norm = std::sqrt(norm2);
    const double inverse = norm > 1e-30 && std::isfinite(norm) ? 1.0 / norm : 0.0;
    for (uint64_t i = 0; i < n; ++i) a[i * r + c] *= inverse;
    for (uint64_t d = c + 1; d < r; ++d) {
      double dot = 0.0;
      for (uint64_t i = 0; i < n; ++i) dot += a[i * r + c] * a[i * r + d];
      for (uint64_t i = 0; i < n; ++i) a[i * r + d] -= dot * a[i * r + c];
    }
  }
}

class PowerSgdBucket final : public sdk::CompressorBucket {
 public:
  PowerSgdBucket(const sdk::Host& host, const PowerSgdConfig& config, const sdk::CompressBucket& b)
      : config_(config),
        index_(b.index),
        world_size_(b.world_size),
        residual_(host, TESSERA_RANK_UNKNOWN, TESSERA_MEM_COMM),
        p_(host, TESSERA_RANK_UNKNOWN, TESSERA_MEM_COMM),
        q_(host, TESSERA_RANK_UNKNOWN, TESSERA_MEM_COMM),
        plain_buffer_(host, TESSERA_RANK_UNKNOWN, TESSERA_MEM_COMM),
        scratch_(host, TESSERA_RANK_UNKNOWN, TESSERA_MEM_COMM) {
    plan(b);
  }

  [[nodiscard]] uint64_t encoded_bytes() const override { return 0; }

  void reduce(std::span<float> grads, const sdk::CompressComm& comm) override {
    TESSERA_CHECK(comm.size() == world_size_, TESSERA_ERR_INVALID_ARGUMENT, "powersgd: bucket ",
                  index_, " was planned for ", world_size_, " ranks, reduced over ", comm.size());
    // 1. What is not compressed: one allreduce, exact.
    if (!plain_buffer_.empty()) {
      uint64_t at = 0;
      for (const Plain& p : plain_) {
        std::copy_n(grads.begin() + static_cast<std::ptrdiff_t>(p.offset), p.count,
                    plain_buffer_.span().begin() + static_cast<std::ptrdiff_t>(at));
        at += p.count;
      }
      comm.allreduce(plain_buffer_.span());
      at = 0;
      for (const Plain& p : plain_) {
        std::copy_n(plain_buffer_.span().begin() + static_cast<std::ptrdiff_t>(at), p.count,
                    grads.begin() + static_cast<std::ptrdiff_t>(p.offset));
        at += p.count;
      }
    }
    if (matrices_.empty()) return;
    // 2. M = gradient + residual (in place: the gradients are replaced by
    // the result anyway); P = M Q for every matrix, one allreduce.
    for (Matrix& mat : matrices_) {
      float* m = grads.data() + mat.offset;
      if (config_.error_feedback) {
        const float* res = residual_.data() + mat.residual_at;
        for (uint64_t i = 0; i < mat.rows * mat.cols; ++i) m[i] += res[i];
      }
      if (mat.fresh || !config_.warm_start) draw_q(mat);
      multiply(m, q_.data() + mat.q_at, p_.data() + mat.p_at, mat.rows, mat.cols, mat.r);
    }
    comm.allreduce(p_.span());
    // 3. P^ = orthonormal P (identical on every rank); Q_i = M^T P^; the
    // residual M - P^ Q_i^T; one allreduce of the Q factors.
    for (Matrix& mat : matrices_) {
      float* p = p_.data() + mat.p_at;
      double* work = scratch_.data();
      for (uint64_t i = 0; i < mat.rows * mat.r; ++i) work[i] = p[i];
      orthonormalise(work, mat.rows, mat.r);
      for (uint64_t i = 0; i < mat.rows * mat.r; ++i) p[i] = static_cast<float>(work[i]);
      const float* m = grads.data() + mat.offset;
      float* q = q_.data() + mat.q_at;
      multiply_transposed(m, p, q, mat.rows, mat.cols, mat.r);
      if (config_.error_feedback) {
        float* res = residual_.data() + mat.residual_at;
        outer(p, q, res, mat.rows, mat.cols, mat.r);
        for (uint64_t i = 0; i < mat.rows * mat.cols; ++i) res[i] = m[i] - res[i];
      }
    }
    comm.allreduce(q_.span());
    // 4. The result P^ Q^T. A Q with nothing finite and non-zero in it (a
    // zero or non-finite gradient) would stay so when warm-started: it is
    // drawn again next step (the same decision on every rank).
    for (Matrix& mat : matrices_) {
      const float* q = q_.data() + mat.q_at;
      outer(p_.data() + mat.p_at, q, grads.data() + mat.offset, mat.rows, mat.cols, mat.r);
      bool usable = true;
      bool any = false;
      for (uint64_t i = 0; i < mat.cols * mat.r; ++i) {
        usable = usable && std::isfinite(q[i]);
        any = any || q[i] != 0.0F;
      }
      mat.fresh = !(usable && any);
    }
    ++step_;
  }

 private:
  void plan(const sdk::CompressBucket& b) {
    uint64_t at = 0;  // first element not yet covered
    uint64_t p_size = 0;
    uint64_t q_size = 0;
    uint64_t residual_size = 0;
    uint64_t plain_size = 0;
    uint64_t scratch = 0;
    const auto add_plain = [&](uint64_t offset, uint64_t count) {
      if (count == 0) return;
      if (!plain_.empty() && plain_.back().offset + plain_.back().count == offset) {
        plain_.back().count += count;
      } else {
        plain_.push_back(Plain{offset, count});
      }
      plain_size += count;
    };
    for (size_t t = 0; t < b.tensors.size(); ++t) {
      const sdk::CompressTensor& tensor = b.tensors[t];
      TESSERA_CHECK(tensor.rows >= 1 && tensor.cols >= 1 && tensor.offset >= at &&
                        tensor.offset <= b.elements &&
                        tensor.elements() <= b.elements - tensor.offset,
                    TESSERA_ERR_INVALID_ARGUMENT, "powersgd: bucket ", b.index, " tensor ", t, " (",
                    tensor.rows, " x ", tensor.cols, " at ", tensor.offset,
                    ") is empty, overlaps the one before or ends outside the bucket of ",
                    b.elements, " elements");
      add_plain(at, tensor.offset - at);
      at = tensor.offset + tensor.elements();
      const auto n = static_cast<uint64_t>(tensor.rows);
      const auto m = static_cast<uint64_t>(tensor.cols);
      const uint64_t r = std::min({static_cast<uint64_t>(config_.rank), n, m});
      const bool compress =
          n > 1 && m > 1 &&
          static_cast<double>(n * m) > config_.min_compression * static_cast<double>((n + m) * r);
      if (!compress) {
        add_plain(tensor.offset, tensor.elements());
        continue;
      }
      matrices_.push_back(Matrix{tensor.offset, n, m, r, t, p_size, q_size, residual_size, true});
      p_size += n * r;
      q_size += m * r;
      if (config_.error_feedback) residual_size += n * m;
      scratch = std::max(scratch, std::max(n, m) * r);
    }
    add_plain(at, b.elements - at);
    residual_.resize(residual_size);
    p_.resize(p_size);
    q_.resize(q_size);
    plain_buffer_.resize(plain_size);
    scratch_.resize(scratch);
  }

  // A random Q with orthonormal columns, the same on every rank: keyed by
  // the seed, the bucket and the tensor's position (and the step when not
  // warm-started, so each step draws a new one).
  void draw_q(Matrix& mat) {
    const CounterRng rng(config_.seed, static_cast<uint64_t>(index_), mat.position,
                         config_.warm_start ? uint64_t{0} : step_ + 1);
    double* work = scratch_.data();
    for (uint64_t i = 0; i < mat.cols * mat.r; ++i) work[i] = rng.normal(i);
    orthonormalise(work, mat.cols, mat.r);
    float* q = q_.data() + mat.q_at;
    for (uint64_t i = 0; i < mat.cols * mat.r; ++i) q[i] = static_cast<float>(work[i]);
    mat.fresh = false;
  }

  // out (n x r) = a (n x m) b (m x r), row-major, accumulated in double.
  void multiply(const float* a, const float* b, float* out, uint64_t n, uint64_t m, uint64_t r) {
    double* acc = scratch_.data();
    for (uint64_t i = 0; i < n; ++i) {
      std::fill_n(acc, r, 0.0);
      const float* row = a + i * m;
      for (uint64_t j = 0; j < m; ++j) {
        const double x = row[j];
        const float* brow = b + j * r;
        for (uint64_t k = 0; k < r; ++k) acc[k] += x * brow[k];
      }
      for (uint64_t k = 0; k < r; ++k) out[i * r + k] = static_cast<float>(acc[k]);
    }
  }
  // out (m x r) = a^T (a: n x m) b (n x r), accumulated in double.
  void multiply_transposed(const float* a, const float* b, float* out, uint64_t n, uint64_t m,
                           uint64_t r) {
    double* acc = scratch_.data();
    std::fill_n(acc, m * r, 0.0);
    for (uint64_t i = 0; i < n; ++i) {
      const float* row = a + i * m;
      const float* brow = b + i * r;
      for (uint64_t j = 0; j < m; ++j) {
        const double x = row[j];
        for (uint64_t k = 0; k < r; ++k) acc[j * r + k] += x * brow[k];
      }
    }
    for (uint64_t i = 0; i < m * r; ++i) out[i] = static_cast<float>(acc[i]);
  }
  // out (n x m) = p (n x r) q^T (q: m x r), each entry summed in double.
  static void outer(const float* p, const float* q, float* out, uint64_t n, uint64_t m,
                    uint64_t r) {
    for (uint64_t i = 0; i < n; ++i) {
      const float* prow = p + i * r;
      for (uint64_t j = 0; j < m; ++j) {
        const float* qrow = q + j * r;
        double s = 0.0;
        for (uint64_t k = 0; k < r; ++k) s += static_cast<double>(prow[k]) * qrow[k];
        out[i * m + j] = static_cast<float>(s);
      }
    }
  }

  PowerSgdConfig config_;
  int32_t index_;
  int32_t world_size_;
  uint64_t step_ = 0;
  std::vector<Matrix> matrices_;
  std::vector<Plain> plain_;
  sdk::TrackedBuffer<float> residual_;      // error feedback, per compressed matrix
  sdk::TrackedBuffer<float> p_;             // P factors of all matrices
  sdk::TrackedBuffer<float> q_;             // Q factors (kept for the warm start)
  sdk::TrackedBuffer<float> plain_buffer_;  // the uncompressed entries, gathered
  sdk::TrackedBuffer<double> scratch_;      // accumulators and orthonormalisation
};

class PowerSgdCompressor {
 public:
  PowerSgdCompressor(const sdk::Host& host, const sdk::Options& options) : host_(host) {
    config_.rank = options.get_int("rank");
    TESSERA_CHECK(config_.rank >= 1 && config_.rank <= 4096, TESSERA_ERR_INVALID_ARGUMENT,
                  "option 'rank' = ", config_.rank,
                  " must be in [1, 4096] (the rank of each matrix's approximation)");
    config_.warm_start = options.get_bool("warm_start");
    config_.error_feedback = options.get_bool("error_feedback");
    config_.min_compression = options.get_float("min_compression");
    TESSERA_CHECK(std::isfinite(config_.min_compression) && config_.min_compression >= 0.0,
                  TESSERA_ERR_INVALID_ARGUMENT,
                  "option 'min_compression' = ", config_.min_compression,
                  " must be a finite number >= 0");
    config_.seed = static_cast<uint64_t>(options.get_int("seed"));
  }
  [[nodiscard]] sdk::CompressKind kind() const noexcept { return sdk::CompressKind::kCollective; }
  [[nodiscard]] tessera_dtype wire_dtype() const noexcept { return TESSERA_U8; }
  [[nodiscard]] std::unique_ptr<sdk::CompressorBucket> bucket(const sdk::CompressBucket& b) const {
    check_bucket("powersgd", b);
    return std::make_unique<PowerSgdBucket>(host_, config_, b);
  }

 private:
  sdk::Host host_;
  PowerSgdConfig config_;
};

}  // namespace
}  // namespace tessera::compressors

TESSERA_REGISTER_COMPRESSOR(tessera::compressors::PowerSgdCompressor, "powersgd", "0.1.0",
                            "rank-r power iteration per gradient matrix (PowerSGD) with error "
                            "feedback and warm start: two small allreduces per bucket of matrices",
                            tessera::compressors::kPowerSgdOptions)

// The CUDA units' kernels, run on CPU threads by the emulation
// (emulation.hpp), against the CPU kernels they mirror
// (tessera/models/kernels.hpp) and, for the fused attention, against a
// direct double-precision evaluation of causal softmax attention: every
// row norm, the rotary embedding, SwiGLU, the embedding lookup and
// scatter, the cross-entropy, and the attention forward and backward in
// gpt's fused qkv layout and in llama's separate q, k, v with grouped
// key/value heads, in tiles as wide as the device's shared memory allows;
// the column sums of the bias and norm gradients; and a refused launch.
// Sizes are chosen so that rows are wider than a block's 256 threads (64
// under a sanitizer, emulation.cpp) where a kernel strides over them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device_kernels.hpp"
#include "emulation.hpp"
#include "tessera/models/kernels.hpp"

namespace tessera::model::cuda {
namespace {

std::vector<float> random_values(std::size_t count, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(count);
  for (float& v : out) v = normal(gen);
  return out;
}

// Every element within `tolerance` of the largest magnitude of `expected`.
template <typename A, typename B>
void expect_close(const std::vector<A>& actual, const std::vector<B>& expected, double tolerance,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double largest = 0.0;
  for (const B& e : expected) largest = std::max(largest, std::fabs(static_cast<double>(e)));
  double worst = 0.0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double diff =
        std::fabs(static_cast<double>(actual[i]) - static_cast<double>(expected[i]));
    if (diff > worst) {
      worst = diff;
      at = i;
    }
  }
  EXPECT_LE(worst, tolerance * std::max(largest, 1e-30))
      << what << ": element " << at << " is " << actual[at] << ", expected " << expected[at]
      << " (largest " << largest << ")";
}

constexpr double kTolerance = 1e-5;

// `x` rounded to `elem` (bf16 or f16) by the kernels' own conversion.
std::vector<uint16_t> rounded(Elem elem, const std::vector<float>& x) {
  std::vector<uint16_t> bits(x.size());
  (elem == Elem::bf16 ? to_bf16 : to_f16)(x.data(), bits.data(), static_cast<int64_t>(x.size()),
                                          nullptr);
  return bits;
}

// 16-bit values of type `elem` as the floats they are exactly.
std::vector<float> widened(Elem elem, const std::vector<uint16_t>& bits) {
  std::vector<float> x(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) {
    x[i] = elem == Elem::bf16 ? __bfloat162float(__nv_bfloat16{bits[i]})
                              : __half2float(__half{bits[i]});
  }
  return x;
}

// The products' 16-bit inputs: rounded to nearest even, element by element.
TEST(CudaKernelsEmulated, SixteenBitCopiesRoundToNearestEven) {
  const std::vector<float> in = {1.0f, -2.0f, 1.00390625f, 1.01171875f, 65504.0f, 65520.0f, 6e-8f};
  std::vector<uint16_t> bf16(in.size());
  to_bf16(in.data(), bf16.data(), static_cast<int64_t>(in.size()), nullptr);
  EXPECT_EQ(bf16, (std::vector<uint16_t>{0x3f80, 0xc000, 0x3f80, 0x3f82, 0x4780, 0x4780, 0x3381}));
  std::vector<uint16_t> f16(in.size());
  to_f16(in.data(), f16.data(), static_cast<int64_t>(in.size()), nullptr);
  EXPECT_EQ(f16, (std::vector<uint16_t>{0x3c00, 0xc000, 0x3c04, 0x3c0c, 0x7bff, 0x7c00, 0x0001}));
}

// Column sums (a bias's gradient) added into what is there, by a launch
// of many lanes per column: every column within 1e-5 of the sum in double,
// widths and heights that are not multiples of a block's 32 columns or
// its lanes, and the same launch summing bit for bit the same way again.
TEST(CudaKernelsEmulated, ColumnSumsAddTheRowsOfEveryColumn) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{70, 45}, {1, 33}, {1100, 3}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    const std::vector<float> m =
        random_values(static_cast<std::size_t>(rows * cols), static_cast<uint32_t>(rows));
    const std::vector<float> start = random_values(static_cast<std::size_t>(cols), 9);
    std::vector<float> out = start;
    column_sum_add(m.data(), rows, cols, out.data(), nullptr);
    std::vector<double> expected(start.begin(), start.end());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols; ++j) expected[static_cast<std::size_t>(j)] += m[r * cols + j];
    }
    expect_close(out, expected, kTolerance, "column sums");
    std::vector<float> again = start;
    column_sum_add(m.data(), rows, cols, again.data(), nullptr);
    EXPECT_EQ(again, out);
  }
}

TEST(CudaKernelsEmulated, RmsNormForwardAndBackwardMatchTheCpu) {
  const int64_t rows = 5;
  const int64_t d = 300;  // wider than a block
  const float eps = 1e-5f;
  const auto n = static_cast<std::size_t>(rows * d);
  const std::vector<float> x = random_values(n, 1);
  const std::vector<float> g = random_values(static_cast<std::size_t>(d), 2);
  const std::vector<float> dy = random_values(n, 3);
  std::vector<float> y_cpu(n);
  std::vector<float> rstd_cpu(rows);
  kernels::rmsnorm_forward(x.data(), g.data(), rows, d, eps, y_cpu.data(), rstd_cpu.data());
  std::vector<float> y(n);
  std::vector<float> rstd(rows);
  const std::size_t before = emu::launches();
  rmsnorm_forward(x.data(), g.data(), rows, d, eps, y.data(), rstd.data(), nullptr);
  EXPECT_EQ(emu::launches(), before + 1);
  expect_close(y, y_cpu, kTolerance, "y");
  expect_close(rstd, rstd_cpu, kTolerance, "rstd");

  std::vector<float> dx_cpu(n, 0.0f);
  std::vector<float> dg_cpu(static_cast<std::size_t>(d), 0.5f);
  kernels::rmsnorm_backward(x.data(), g.data(), rstd_cpu.data(), dy.data(), rows, d, dx_cpu.data(),
                            dg_cpu.data());
  std::vector<float> dx(n, 0.0f);
  rmsnorm_backward_input(x.data(), g.data(), rstd.data(), dy.data(), rows, d, dx.data(), false,
                         nullptr);
  expect_close(dx, dx_cpu, kTolerance, "dx");
  std::vector<float> dx_added(n, 1.0f);  // accumulate: added to what is there
  rmsnorm_backward_input(x.data(), g.data(), rstd.data(), dy.data(), rows, d, dx_added.data(), true,
                         nullptr);
  for (float& v : dx_cpu) v += 1.0f;
  expect_close(dx_added, dx_cpu, kTolerance, "dx accumulated");
  std::vector<float> dg(static_cast<std::size_t>(d), 0.5f);
  rmsnorm_backward_params(x.data(), rstd.data(), dy.data(), rows, d, dg.data(), nullptr);
  expect_close(dg, dg_cpu, kTolerance, "dg");
}

TEST(CudaKernelsEmulated, LayerNormForwardAndBackwardMatchTheCpu) {
  const int64_t rows = 4;
  const int64_t d = 270;
  const auto n = static_cast<std::size_t>(rows * d);
  const std::vector<float> x = random_values(n, 4, 2.0f);
  const std::vector<float> g = random_values(static_cast<std::size_t>(d), 5);
  const std::vector<float> b = random_values(static_cast<std::size_t>(d), 6);
  const std::vector<float> dy = random_values(n, 7);
  std::vector<float> y_cpu(n);
  std::vector<float> mean_cpu(rows);
  std::vector<float> rstd_cpu(rows);
  kernels::layernorm_forward(x.data(), g.data(), b.data(), rows, d, y_cpu.data(), mean_cpu.data(),
                             rstd_cpu.data());
  std::vector<float> y(n);
  std::vector<float> mean(rows);
  std::vector<float> rstd(rows);
  layernorm_forward(x.data(), g.data(), b.data(), rows, d, y.data(), mean.data(), rstd.data(),
                    nullptr);
  expect_close(y, y_cpu, kTolerance, "y");
  expect_close(mean, mean_cpu, kTolerance, "mean");
  expect_close(rstd, rstd_cpu, kTolerance, "rstd");

  std::vector<float> dx_cpu(n, 0.0f);
  std::vector<float> dg_cpu(static_cast<std::size_t>(d), 0.0f);
  std::vector<float> db_cpu(static_cast<std::size_t>(d), 0.0f);
  kernels::layernorm_backward(x.data(), g.data(), mean_cpu.data(), rstd_cpu.data(), dy.data(), rows,
                              d, dx_cpu.data(), dg_cpu.data(), db_cpu.data());
  std::vector<float> dx(n, 0.0f);
  layernorm_backward_input(x.data(), g.data(), mean.data(), rstd.data(), dy.data(), rows, d,
                           dx.data(), false, nullptr);
  expect_close(dx, dx_cpu, kTolerance, "dx");
  std::vector<float> dg(static_cast<std::size_t>(d), 0.0f);
  std::vector<float> db(static_cast<std::size_t>(d), 0.0f);
  layernorm_backward_params(x.data(), mean.data(), rstd.data(), dy.data(), rows, d, dg.data(),
                            db.data(), nullptr);
  expect_close(dg, dg_cpu, kTolerance, "dg");
  expect_close(db, db_cpu, kTolerance, "db");
}

TEST(CudaKernelsEmulated, RotaryEmbeddingAndItsInverseMatchTheCpu) {
  const int64_t batch = 2;
  const int64_t seq = 6;
  const int64_t heads = 3;
  const int64_t hd = 8;
  const int64_t rows = batch * seq;
  std::vector<float> cos(static_cast<std::size_t>(seq * hd / 2));
  std::vector<float> sin(cos.size());
  kernels::rope_tables(seq, hd, 10000.0, cos.data(), sin.data());
  const std::vector<float> x = random_values(static_cast<std::size_t>(rows * heads * hd), 8);
  for (const bool inverse : {false, true}) {
    std::vector<float> cpu = x;
    kernels::rope_apply(cpu.data(), rows, seq, heads, hd, cos.data(), sin.data(), inverse);
    std::vector<float> emulated = x;
    rope_apply(emulated.data(), rows, seq, heads, hd, cos.data(), sin.data(), inverse, nullptr);
    expect_close(emulated, cpu, 1e-6, inverse ? "inverse" : "forward");
  }
  // The inverse undoes the rotation.
  std::vector<float> there_and_back = x;
  rope_apply(there_and_back.data(), rows, seq, heads, hd, cos.data(), sin.data(), false, nullptr);
  rope_apply(there_and_back.data(), rows, seq, heads, hd, cos.data(), sin.data(), true, nullptr);
  expect_close(there_and_back, x, 1e-6, "rotated and back");
}

TEST(CudaKernelsEmulated, SwiGluAndItsGradientMatchTheCpu) {
  const std::size_t count = 700;
  const std::vector<float> gate = random_values(count, 9, 3.0f);
  const std::vector<float> up = random_values(count, 10);
  const std::vector<float> dy = random_values(count, 11);
  std::vector<float> y_cpu(count);
  kernels::swiglu_forward(gate.data(), up.data(), static_cast<int64_t>(count), y_cpu.data());
  std::vector<float> y(count);
  swiglu_forward(gate.data(), up.data(), Elem::f32, static_cast<int64_t>(count), y.data(), nullptr);
  expect_close(y, y_cpu, kTolerance, "y");
  std::vector<float> dgate_cpu(count);
  std::vector<float> dup_cpu(count);
  kernels::swiglu_backward(gate.data(), up.data(), dy.data(), static_cast<int64_t>(count),
                           dgate_cpu.data(), dup_cpu.data());
  std::vector<float> dgate(count);
  std::vector<float> dup(count);
  swiglu_backward(gate.data(), up.data(), Elem::f32, dy.data(), static_cast<int64_t>(count),
                  dgate.data(), dup.data(), nullptr);
  expect_close(dgate, dgate_cpu, kTolerance, "dgate");
  expect_close(dup, dup_cpu, kTolerance, "dup");
  // From 16-bit gate and up: the same, of the rounded values.
  for (const Elem elem : {Elem::bf16, Elem::f16}) {
    SCOPED_TRACE(elem == Elem::bf16 ? "bf16" : "f16");
    const std::vector<uint16_t> gate16 = rounded(elem, gate);
    const std::vector<uint16_t> up16 = rounded(elem, up);
    const std::vector<float> gate_r = widened(elem, gate16);
    const std::vector<float> up_r = widened(elem, up16);
    kernels::swiglu_forward(gate_r.data(), up_r.data(), static_cast<int64_t>(count), y_cpu.data());
    swiglu_forward(gate16.data(), up16.data(), elem, static_cast<int64_t>(count), y.data(),
                   nullptr);
    expect_close(y, y_cpu, kTolerance, "y");
    kernels::swiglu_backward(gate_r.data(), up_r.data(), dy.data(), static_cast<int64_t>(count),
                             dgate_cpu.data(), dup_cpu.data());
    swiglu_backward(gate16.data(), up16.data(), elem, dy.data(), static_cast<int64_t>(count),
                    dgate.data(), dup.data(), nullptr);
    expect_close(dgate, dgate_cpu, kTolerance, "dgate");
    expect_close(dup, dup_cpu, kTolerance, "dup");
  }
}

// The batch's rows grouped by token: the held tokens ascending, each
// one's rows in row order.
TEST(CudaKernelsEmulated, TokenRowsGroupTheHeldTokensRowsInOrder) {
  const std::vector<int32_t> ids = {4, 0, 4, 2, 2, 1, 0, 4};
  const TokenRows all = TokenRows::of(ids.data(), static_cast<int64_t>(ids.size()), {0, 5});
  EXPECT_EQ(all.tokens, (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(all.starts, (std::vector<int32_t>{0, 2, 3, 5, 8}));
  EXPECT_EQ(all.order, (std::vector<int32_t>{1, 6, 5, 3, 4, 0, 2, 7}));
  const TokenRows some = TokenRows::of(ids.data(), static_cast<int64_t>(ids.size()), {1, 2});
  EXPECT_EQ(some.tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(some.starts, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(some.order, (std::vector<int32_t>{5, 3, 4}));
  const TokenRows none = TokenRows::of(ids.data(), static_cast<int64_t>(ids.size()), {3, 1});
  EXPECT_TRUE(none.tokens.empty());
  EXPECT_EQ(none.starts, (std::vector<int32_t>{0}));
}

// The lookup and its scatter, with and without positions, of the whole
// table and of a rank's rows of a vocabulary-parallel one (tokens it does
// not hold look up zeros and scatter nothing; positions get every row).
TEST(CudaKernelsEmulated, EmbeddingWithAndWithoutPositions) {
  const int64_t batch = 2;
  const int64_t seq = 3;
  const int64_t vocab = 5;
  const int64_t d = 260;
  const std::vector<int32_t> tokens = {4, 0, 4, 2, 2, 1};
  const std::vector<float> wte = random_values(static_cast<std::size_t>(vocab * d), 12);
  const std::vector<float> wpe = random_values(static_cast<std::size_t>(seq * d), 13);
  const std::vector<float> dx = random_values(static_cast<std::size_t>(batch * seq * d), 14);
  for (const VocabRange held : {VocabRange{0, vocab}, VocabRange{1, 2}}) {
    for (const bool positions : {true, false}) {
      const std::string what = std::string(positions ? "with" : "without") + " positions, rows " +
                               std::to_string(held.lo) + "+" + std::to_string(held.rows);
      const auto table = wte.begin() + held.lo * d;
      const std::vector<float> mine(table, table + held.rows * d);
      std::vector<float> x(dx.size());
      embedding_forward(tokens.data(), mine.data(), positions ? wpe.data() : nullptr, batch, seq, d,
                        held, x.data(), nullptr);
      std::vector<double> x_ref(dx.size(), 0.0);
      std::vector<double> dwte_ref(mine.size(), 0.0);
      std::vector<float> dwte_in_row_order(mine.size(), 0.0f);  // f32, row after row
      std::vector<double> dwpe_ref(wpe.size(), 0.0);
      for (int64_t r = 0; r < batch * seq; ++r) {
        const int64_t t = tokens[static_cast<std::size_t>(r)] - held.lo;
        for (int64_t j = 0; j < d; ++j) {
          const auto at = static_cast<std::size_t>(r * d + j);
          const auto position_at = static_cast<std::size_t>((r % seq) * d + j);
          dwpe_ref[position_at] += dx[at];
          if (t < 0 || t >= held.rows) continue;
          const auto token_at = static_cast<std::size_t>(t * d + j);
          x_ref[at] = mine[token_at] + (positions ? wpe[position_at] : 0.0f);
          dwte_ref[token_at] += dx[at];
          dwte_in_row_order[token_at] += dx[at];
        }
      }
      expect_close(x, x_ref, 1e-7, "lookup " + what);
      std::vector<float> dwte(mine.size(), 0.0f);
      std::vector<float> dwpe(wpe.size(), 0.0f);
      const TokenRows rows =
          TokenRows::of(tokens.data(), static_cast<int64_t>(tokens.size()), held);
      embedding_backward({rows.tokens.data(), rows.starts.data(), rows.order.data(),
                          static_cast<int64_t>(rows.tokens.size())},
                         dx.data(), batch, seq, d, held, dwte.data(),
                         positions ? dwpe.data() : nullptr, nullptr);
      expect_close(dwte, dwte_ref, kTolerance, "dwte " + what);
      // Each token's rows in row order: the sums of a loop over the rows.
      EXPECT_EQ(dwte, dwte_in_row_order) << what;
      if (positions) {
        expect_close(dwpe, dwpe_ref, kTolerance, "dwpe " + what);
      } else {
        EXPECT_TRUE(std::all_of(dwpe.begin(), dwpe.end(), [](float v) { return v == 0.0f; }));
      }
    }
  }
}

TEST(CudaKernelsEmulated, CrossEntropyMatchesTheCpu) {
  const int64_t rows = 6;
  const int64_t cols = 300;
  const std::vector<float> logits = random_values(static_cast<std::size_t>(rows * cols), 15, 2.0f);
  const std::vector<int32_t> targets = {0, 299, 17, 150, 150, 3};
  std::vector<float> probs_cpu(logits.size());
  const double loss_cpu = kernels::softmax_xent_forward(logits.data(), targets.data(), rows, cols,
                                                        probs_cpu.data(), "test");
  std::vector<float> probs(logits.size());
  std::vector<double> row_loss(rows);
  softmax_xent(logits.data(), targets.data(), rows, cols, probs.data(), row_loss.data(), nullptr);
  expect_close(probs, probs_cpu, kTolerance, "probabilities");
  float loss = 0.0f;
  sum_loss(row_loss.data(), rows, 0.5, &loss, nullptr);
  EXPECT_NEAR(loss, 0.5 * loss_cpu, 1e-5 * loss_cpu);
  std::vector<float> dlogits_cpu(logits.size());
  kernels::softmax_xent_backward(probs_cpu.data(), targets.data(), rows, cols, 0.25f,
                                 dlogits_cpu.data());
  std::vector<float> dlogits(logits.size());
  xent_backward(probs.data(), targets.data(), rows, cols, 0, 0.25f, dlogits.data(), nullptr);
  expect_close(dlogits, dlogits_cpu, kTolerance, "dlogits");
}

// The cross-entropy over logits split by columns between 3 "ranks" (the
// group's allreduces done here): each rank's probabilities are its
// columns of the whole rows' softmax, every rank's loss the whole loss,
// and its gradient its columns of the whole gradient.
TEST(CudaKernelsEmulated, CrossEntropySplitByColumnsMatchesTheWhole) {
  const int64_t rows = 5;
  const int64_t cols = 90;  // 30 a rank
  const int64_t parts = 3;
  const int64_t c = cols / parts;
  const std::vector<float> logits = random_values(static_cast<std::size_t>(rows * cols), 16, 3.0f);
  const std::vector<int32_t> targets = {0, 89, 30, 29, 61};
  std::vector<float> probs_cpu(logits.size());
  const double loss_cpu = kernels::softmax_xent_forward(logits.data(), targets.data(), rows, cols,
                                                        probs_cpu.data(), "test");
  std::vector<float> dlogits_cpu(logits.size());
  kernels::softmax_xent_backward(probs_cpu.data(), targets.data(), rows, cols, 0.25f,
                                 dlogits_cpu.data());
  // Each rank's columns, its row maxima and sums.
  std::vector<std::vector<float>> local(parts), mx(parts), sums(parts), probs(parts);
  for (int64_t k = 0; k < parts; ++k) {
    for (int64_t r = 0; r < rows; ++r) {
      const auto from = logits.begin() + r * cols + k * c;
      local[k].insert(local[k].end(), from, from + c);
    }
    mx[k].resize(rows);
    row_max(local[k].data(), rows, c, mx[k].data(), nullptr);
  }
  std::vector<float> whole_mx(rows, -INFINITY);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < parts; ++k) whole_mx[r] = std::max(whole_mx[r], mx[k][r]);
  }
  std::vector<float> whole_sums(2 * rows, 0.0f);
  for (int64_t k = 0; k < parts; ++k) {
    probs[k].resize(local[k].size());
    sums[k].resize(2 * rows);
    exp_sums(local[k].data(), targets.data(), rows, c, k * c, whole_mx.data(), probs[k].data(),
             sums[k].data(), nullptr);
    for (int64_t i = 0; i < 2 * rows; ++i) whole_sums[i] += sums[k][i];
  }
  for (int64_t k = 0; k < parts; ++k) {
    std::vector<double> row_loss(rows);
    xent_normalize(probs[k].data(), whole_sums.data(), whole_mx.data(), rows, c, row_loss.data(),
                   nullptr);
    float loss = 0.0f;
    sum_loss(row_loss.data(), rows, 0.5, &loss, nullptr);
    EXPECT_NEAR(loss, 0.5 * loss_cpu, 1e-5 * loss_cpu) << "rank " << k;
    std::vector<float> dlogits(local[k].size());
    xent_backward(probs[k].data(), targets.data(), rows, c, k * c, 0.25f, dlogits.data(), nullptr);
    std::vector<float> want_probs, want_dlogits;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t at = r * cols + k * c;
      want_probs.insert(want_probs.end(), probs_cpu.begin() + at, probs_cpu.begin() + at + c);
      want_dlogits.insert(want_dlogits.end(), dlogits_cpu.begin() + at,
                          dlogits_cpu.begin() + at + c);
    }
    expect_close(probs[k], want_probs, kTolerance, "probabilities of rank " + std::to_string(k));
    expect_close(dlogits, want_dlogits, kTolerance, "dlogits of rank " + std::to_string(k));
  }
}

// Causal attention evaluated directly in double: q [rows, heads·dh], k and
// v [rows, kv_heads·dh] (query head h reading key/value head h / group),
// and the gradients of Σ out ⊙ dout. With `stored_out`, each row's
// Σ p·dp is taken as dout · stored_out, as the kernels take it from the
// output they stored (in 16 bits under bf16 or f16).
struct AttentionReference {
  std::vector<double> out, lse, dq, dk, dv;
};

AttentionReference reference_attention(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v, const std::vector<float>& dout,
                                       int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                                       int64_t dh, const std::vector<float>* stored_out = nullptr) {
  const int64_t group = heads / kv_heads;
  const int64_t qw = heads * dh;
  const int64_t kw = kv_heads * dh;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  AttentionReference r;
  r.out.assign(q.size(), 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  r.lse.assign(static_cast<std::size_t>(batch * heads * seq), 0.0);
  auto at = [](int64_t row, int64_t width, int64_t col) {
    return static_cast<std::size_t>(row * width + col);
  };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < seq; ++i) {
        const int64_t qi = b * seq + i;
        std::vector<double> p(static_cast<std::size_t>(i + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0.0;
          for (int64_t e = 0; e < dh; ++e) {
            s +=
                static_cast<double>(q[at(qi, qw, h * dh + e)]) * k[at(b * seq + j, kw, g * dh + e)];
          }
          p[static_cast<std::size_t>(j)] = s * scale;
          mx = std::max(mx, s * scale);
        }
        double sum = 0.0;
        for (double& pj : p) {
          pj = std::exp(pj - mx);
          sum += pj;
        }
        r.lse[static_cast<std::size_t>((b * heads + h) * seq + i)] = mx + std::log(sum);
        for (double& pj : p) pj /= sum;
        // out_i, then the gradients: dp_ij = dout_i·v_j, ds = p (dp − Σ p dp).
        std::vector<double> dp(p.size());
        double dot = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          const auto jj = static_cast<std::size_t>(j);
          double d = 0.0;
          for (int64_t e = 0; e < dh; ++e) {
            const double vv = v[at(b * seq + j, kw, g * dh + e)];
            r.out[at(qi, qw, h * dh + e)] += p[jj] * vv;
            d += static_cast<double>(dout[at(qi, qw, h * dh + e)]) * vv;
          }
          dp[jj] = d;
          dot += p[jj] * d;
        }
        if (stored_out != nullptr) {
          dot = 0.0;
          for (int64_t e = 0; e < dh; ++e) {
            dot += static_cast<double>(dout[at(qi, qw, h * dh + e)]) *
                   (*stored_out)[at(qi, qw, h * dh + e)];
          }
        }
        for (int64_t j = 0; j <= i; ++j) {
          const auto jj = static_cast<std::size_t>(j);
          const double ds = p[jj] * (dp[jj] - dot);
          for (int64_t e = 0; e < dh; ++e) {
            r.dq[at(qi, qw, h * dh + e)] += scale * ds * k[at(b * seq + j, kw, g * dh + e)];
            r.dk[at(b * seq + j, kw, g * dh + e)] += scale * ds * q[at(qi, qw, h * dh + e)];
            r.dv[at(b * seq + j, kw, g * dh + e)] += p[jj] * dout[at(qi, qw, h * dh + e)];
          }
        }
      }
    }
  }
  return r;
}

// llama's layout: q, k and v apart, query heads sharing key/value heads.
struct AttentionCase {
  int64_t batch, seq, heads, kv_heads, dh;
};

struct AttentionResult {
  std::vector<float> out, lse, dq, dk, dv;
};

// `c` on separate q, k and v of type `elem`.
Attention attention_of(const AttentionCase& c, const void* q, const void* k, const void* v,
                       Elem elem = Elem::f32) {
  Attention a{q,
              k,
              v,
              c.heads * c.dh,
              c.kv_heads * c.dh,
              c.batch,
              c.seq,
              c.heads,
              c.kv_heads,
              c.dh,
              1.0f / std::sqrt(static_cast<float>(c.dh))};
  a.elem = elem;
  return a;
}

// The kernels' forward and backward of `c` on q, k, v and dout.
AttentionResult run_attention(const AttentionCase& c, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v,
                              const std::vector<float>& dout) {
  const Attention a = attention_of(c, q.data(), k.data(), v.data());
  AttentionResult r;
  r.out.assign(q.size(), 0.0f);
  r.lse.assign(static_cast<std::size_t>(c.batch * c.heads * c.seq), 0.0f);
  attention_forward(a, r.out.data(), r.lse.data(), nullptr);
  std::vector<float> delta(r.lse.size());
  r.dq.assign(q.size(), 7.0f);  // written, not added to
  r.dk.assign(k.size(), 7.0f);
  r.dv.assign(v.size(), 7.0f);
  attention_backward(a, r.out.data(), r.lse.data(), dout.data(), delta.data(), r.dq.data(),
                     r.dk.data(), r.dv.data(), nullptr);
  return r;
}

// Against the direct evaluation in double, with the device's shared memory
// at `optin_bytes`: sequences of one tile and of several with a ragged
// last one, grouped key/value heads, head sizes whose blocks need more than
// the 48 KiB a kernel has without asking, and budgets that narrow the tiles
// down to a single row.
void expect_attention_matches(const AttentionCase& c, std::size_t optin_bytes, uint32_t seed) {
  SCOPED_TRACE("batch " + std::to_string(c.batch) + ", seq " + std::to_string(c.seq) + ", heads " +
               std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + ", dh " +
               std::to_string(c.dh) + ", shared " + std::to_string(optin_bytes));
  const emu::SharedOptin optin(optin_bytes);
  const int64_t rows = c.batch * c.seq;
  const auto q_count = static_cast<std::size_t>(rows * c.heads * c.dh);
  const auto kv_count = static_cast<std::size_t>(rows * c.kv_heads * c.dh);
  const std::vector<float> q = random_values(q_count, seed);
  const std::vector<float> k = random_values(kv_count, seed + 1);
  const std::vector<float> v = random_values(kv_count, seed + 2);
  const std::vector<float> dout = random_values(q_count, seed + 3);
  const AttentionReference ref =
      reference_attention(q, k, v, dout, c.batch, c.seq, c.heads, c.kv_heads, c.dh);
  const AttentionResult r = run_attention(c, q, k, v, dout);
  expect_close(r.out, ref.out, kTolerance, "out");
  expect_close(r.lse, ref.lse, kTolerance, "lse");
  expect_close(r.dq, ref.dq, kTolerance, "dq");
  expect_close(r.dk, ref.dk, kTolerance, "dk (summed over each group's query heads)");
  expect_close(r.dv, ref.dv, kTolerance, "dv (summed over each group's query heads)");
  // The same launch sums in the same order again.
  const AttentionResult again = run_attention(c, q, k, v, dout);
  EXPECT_EQ(again.out, r.out);
  EXPECT_EQ(again.dq, r.dq);
  EXPECT_EQ(again.dk, r.dk);
  EXPECT_EQ(again.dv, r.dv);
}

constexpr std::size_t kH100Shared = 227 * 1024;

TEST(CudaKernelsEmulated, GroupedQueryAttentionMatchesTheDirectEvaluation) {
  // One tile (7 ≤ 8), then 32-row tiles with a ragged third.
  expect_attention_matches({2, 7, 4, 2, 6}, kH100Shared, 16);
  expect_attention_matches({1, 70, 4, 2, 5}, kH100Shared, 26);
}

TEST(CudaKernelsEmulated, AttentionTilesNarrowToTheDevicesSharedMemory) {
  // dh 128: 32-row tiles take 53 to 107 KiB a block, asked for beyond the
  // default 48 KiB; a 48 KiB device gets 16- and 8-row tiles.
  expect_attention_matches({1, 40, 2, 1, 128}, kH100Shared, 36);
  expect_attention_matches({1, 40, 2, 1, 128}, 48 * 1024, 46);
  // Budgets that leave 4-, 2- and 1-row tiles for some kernels.
  for (const std::size_t bytes : {std::size_t{2048}, std::size_t{700}, std::size_t{200}}) {
    expect_attention_matches({2, 11, 3, 1, 6}, bytes, 56);
  }
}

// Under bf16 and f16 the attention reads 16-bit q, k and v and writes a
// 16-bit output, computing in f32: against the direct evaluation of the
// rounded inputs, the output within its rounding, the rest within 1e-5
// (each row's dout · out taken from the rounded output it stored).
TEST(CudaKernelsEmulated, SixteenBitAttentionComputesInF32FromRoundedInputs) {
  const AttentionCase c{2, 37, 4, 2, 8};
  const int64_t rows = c.batch * c.seq;
  const auto q_count = static_cast<std::size_t>(rows * c.heads * c.dh);
  const auto kv_count = static_cast<std::size_t>(rows * c.kv_heads * c.dh);
  for (const Elem elem : {Elem::bf16, Elem::f16}) {
    SCOPED_TRACE(elem == Elem::bf16 ? "bf16" : "f16");
    const std::vector<uint16_t> q = rounded(elem, random_values(q_count, 66));
    const std::vector<uint16_t> k = rounded(elem, random_values(kv_count, 67));
    const std::vector<uint16_t> v = rounded(elem, random_values(kv_count, 68));
    const std::vector<float> dout = random_values(q_count, 69);
    const Attention a = attention_of(c, q.data(), k.data(), v.data(), elem);
    std::vector<uint16_t> out(q_count);
    std::vector<float> lse(static_cast<std::size_t>(c.batch * c.heads * c.seq));
    attention_forward(a, out.data(), lse.data(), nullptr);
    const std::vector<float> stored = widened(elem, out);
    const AttentionReference ref =
        reference_attention(widened(elem, q), widened(elem, k), widened(elem, v), dout, c.batch,
                            c.seq, c.heads, c.kv_heads, c.dh, &stored);
    expect_close(stored, ref.out, elem == Elem::bf16 ? 4e-3 : 1e-3, "out, rounded");
    expect_close(lse, ref.lse, kTolerance, "lse");
    std::vector<float> delta(lse.size());
    std::vector<float> dq(q_count);
    std::vector<float> dk(kv_count);
    std::vector<float> dv(kv_count);
    attention_backward(a, out.data(), lse.data(), dout.data(), delta.data(), dq.data(), dk.data(),
                       dv.data(), nullptr);
    expect_close(dq, ref.dq, kTolerance, "dq");
    expect_close(dk, ref.dk, kTolerance, "dk");
    expect_close(dv, ref.dv, kTolerance, "dv");
  }
}

// A head too wide for even one row a block names the kernel and the sizes.
TEST(CudaKernelsEmulated, AttentionRefusesAHeadTooWideForSharedMemory) {
  const AttentionCase c{1, 4, 1, 1, 64};
  const std::vector<float> q(static_cast<std::size_t>(4 * 64), 0.5f);
  const emu::SharedOptin optin(1024);
  try {
    (void)run_attention(c, q, q, q, q);
    FAIL() << "expected a KernelError";
  } catch (const KernelError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("attention_dq"), std::string::npos) << what;
    EXPECT_NE(what.find("a head of 64 values needs 1304 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("allows 1024"), std::string::npos) << what;
  }
}

// A launch the device refuses throws, naming the kernel and the error,
// rather than leaving its output unwritten.
TEST(CudaKernelsEmulated, ARefusedLaunchThrows) {
  std::vector<float> out(8, 1.0f);
  const std::vector<float> in(8, 2.0f);
  emu::refuse_next_launch();
  try {
    add_into(out.data(), in.data(), 8, nullptr);
    FAIL() << "expected a KernelError";
  } catch (const KernelError& e) {
    EXPECT_STREQ(e.what(),
                 "CUDA kernel add_into failed: cudaErrorInvalidConfiguration: "
                 "cudaErrorInvalidConfiguration");
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "read once";
  add_into(out.data(), in.data(), 8, nullptr);
  EXPECT_EQ(out, std::vector<float>(8, 3.0f));
}

// gpt's layout: q, k and v side by side in one [rows, 3·d] qkv, one
// key/value head per query head.
TEST(CudaKernelsEmulated, FusedQkvAttentionMatchesTheDirectEvaluation) {
  const int64_t batch = 2;
  const int64_t seq = 5;
  const int64_t heads = 3;
  const int64_t dh = 4;
  const int64_t d = heads * dh;
  const int64_t rows = batch * seq;
  const std::vector<float> qkv = random_values(static_cast<std::size_t>(rows * 3 * d), 20);
  const std::vector<float> dout = random_values(static_cast<std::size_t>(rows * d), 21);
  std::vector<float> q(static_cast<std::size_t>(rows * d));
  std::vector<float> k(q.size());
  std::vector<float> v(q.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < d; ++j) {
      const auto to = static_cast<std::size_t>(r * d + j);
      q[to] = qkv[static_cast<std::size_t>(r * 3 * d + j)];
      k[to] = qkv[static_cast<std::size_t>(r * 3 * d + d + j)];
      v[to] = qkv[static_cast<std::size_t>(r * 3 * d + 2 * d + j)];
    }
  }
  const AttentionReference ref = reference_attention(q, k, v, dout, batch, seq, heads, heads, dh);
  const Attention a{qkv.data(),
                    qkv.data() + d,
                    qkv.data() + 2 * d,
                    3 * d,
                    3 * d,
                    batch,
                    seq,
                    heads,
                    heads,
                    dh,
                    1.0f / std::sqrt(static_cast<float>(dh))};
  std::vector<float> out(dout.size());
  std::vector<float> lse(static_cast<std::size_t>(batch * heads * seq));
  attention_forward(a, out.data(), lse.data(), nullptr);
  expect_close(out, ref.out, kTolerance, "out");
  std::vector<float> delta(lse.size());
  std::vector<float> dqkv(qkv.size(), 0.0f);
  attention_backward(a, out.data(), lse.data(), dout.data(), delta.data(), dqkv.data(),
                     dqkv.data() + d, dqkv.data() + 2 * d, nullptr);
  std::vector<double> ref_dqkv(qkv.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < d; ++j) {
      const auto from = static_cast<std::size_t>(r * d + j);
      ref_dqkv[static_cast<std::size_t>(r * 3 * d + j)] = ref.dq[from];
      ref_dqkv[static_cast<std::size_t>(r * 3 * d + d + j)] = ref.dk[from];
      ref_dqkv[static_cast<std::size_t>(r * 3 * d + 2 * d + j)] = ref.dv[from];
    }
  }
  expect_close(dqkv, ref_dqkv, kTolerance, "dqkv");
}

}  // namespace
}  // namespace tessera::model::cuda

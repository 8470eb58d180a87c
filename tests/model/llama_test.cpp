// The llama's kernels (RMSNorm, SwiGLU, rotary embeddings), that attention
// sees token order through the rotation, its parameter shapes with and
// without grouped-query attention, its initialisation, and units shared by
// threads with distinct contexts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../support/models.hpp"
#include "fd_check.hpp"
#include "llama.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/models/kernels.hpp"

namespace tessera::model {
namespace {

using testing::random_values;

double llama_dot(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

TEST(LlamaKernels, RopeRotatesEachPairByItsPositionAngle) {
  constexpr int64_t kSeq = 5, kHeads = 2, kHeadDim = 8, kHalf = kHeadDim / 2;
  constexpr double kTheta = 10000.0;
  std::vector<float> cos(kSeq * kHalf), sin(kSeq * kHalf);
  kernels::rope_tables(kSeq, kHeadDim, kTheta, cos.data(), sin.data());
  // Every row (position) holds the same vector.
  const auto v = random_values(kHeads * kHeadDim, 1.0f, 71);
  std::vector<float> x;
  for (int64_t t = 0; t < 2 * kSeq; ++t) x.insert(x.end(), v.begin(), v.end());
  std::vector<float> rotated = x;
  kernels::rope_apply(rotated.data(), 2 * kSeq, kSeq, kHeads, kHeadDim, cos.data(), sin.data(),
                      false);
  for (int64_t r = 0; r < 2 * kSeq; ++r) {
    const int64_t t = r % kSeq;  // two sequences of kSeq rows
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t i = 0; i < kHalf; ++i) {
        const double angle =
            static_cast<double>(t) * std::pow(kTheta, -2.0 * static_cast<double>(i) / kHeadDim);
        const double a = v[h * kHeadDim + 2 * i];
        const double b = v[h * kHeadDim + 2 * i + 1];
        const float* out = rotated.data() + r * kHeads * kHeadDim + h * kHeadDim + 2 * i;
        EXPECT_NEAR(out[0], a * std::cos(angle) - b * std::sin(angle), 1e-6)
            << "row " << r << " head " << h << " pair " << i;
        EXPECT_NEAR(out[1], a * std::sin(angle) + b * std::cos(angle), 1e-6)
            << "row " << r << " head " << h << " pair " << i;
      }
    }
  }
  // Position 0 is the identity; every other position changes the vector.
  EXPECT_EQ(std::memcmp(rotated.data(), v.data(), v.size() * sizeof(float)), 0);
  for (int64_t t = 1; t < kSeq; ++t) {
    double moved = 0.0;
    for (int64_t j = 0; j < kHeads * kHeadDim; ++j) {
      moved = std::max(moved, std::fabs(static_cast<double>(rotated[t * kHeads * kHeadDim + j]) -
                                        v[static_cast<std::size_t>(j)]));
    }
    EXPECT_GT(moved, 1e-2) << "position " << t;
  }
  // The inverse rotation undoes it.
  kernels::rope_apply(rotated.data(), 2 * kSeq, kSeq, kHeads, kHeadDim, cos.data(), sin.data(),
                      true);
  for (std::size_t j = 0; j < x.size(); ++j) EXPECT_NEAR(rotated[j], x[j], 1e-6) << j;
}

TEST(LlamaKernels, RopeScoresDependOnlyOnRelativePosition) {
  constexpr int64_t kSeq = 8, kHeadDim = 16, kHalf = kHeadDim / 2;
  std::vector<float> cos(kSeq * kHalf), sin(kSeq * kHalf);
  kernels::rope_tables(kSeq, kHeadDim, 100.0, cos.data(), sin.data());
  const auto q1 = random_values(kHeadDim, 1.0f, 72);
  const auto k1 = random_values(kHeadDim, 1.0f, 73);
  std::vector<float> q, k;
  for (int64_t t = 0; t < kSeq; ++t) {
    q.insert(q.end(), q1.begin(), q1.end());
    k.insert(k.end(), k1.begin(), k1.end());
  }
  kernels::rope_apply(q.data(), kSeq, kSeq, 1, kHeadDim, cos.data(), sin.data(), false);
  kernels::rope_apply(k.data(), kSeq, kSeq, 1, kHeadDim, cos.data(), sin.data(), false);
  const auto score = [&](int64_t m, int64_t n) {
    return llama_dot(q.data() + m * kHeadDim, k.data() + n * kHeadDim, kHeadDim);
  };
  EXPECT_NEAR(score(3, 1), score(2, 0), 1e-5);
  EXPECT_NEAR(score(3, 1), score(7, 5), 1e-5);
  EXPECT_NEAR(score(4, 4), llama_dot(q1.data(), k1.data(), kHeadDim), 1e-5);
  EXPECT_GT(std::fabs(score(3, 1) - score(3, 2)), 1e-2);
  EXPECT_GT(std::fabs(score(3, 1) - score(3, 0)), 1e-2);
}

TEST(LlamaKernels, RmsnormGivesUnitRootMeanSquareTimesGain) {
  constexpr int64_t kRows = 3, kWidth = 10;
  const auto x = random_values(kRows * kWidth, 3.0f, 74);
  const auto g = random_values(kWidth, 1.0f, 75);
  std::vector<float> ones(kWidth, 1.0f), y(x.size()), yg(x.size()), rstd(kRows);
  kernels::rmsnorm_forward(x.data(), ones.data(), kRows, kWidth, 1e-6f, y.data(), rstd.data());
  kernels::rmsnorm_forward(x.data(), g.data(), kRows, kWidth, 1e-6f, yg.data(), rstd.data());
  for (int64_t r = 0; r < kRows; ++r) {
    const double ms = llama_dot(y.data() + r * kWidth, y.data() + r * kWidth, kWidth) / kWidth;
    EXPECT_NEAR(ms, 1.0, 1e-5) << "row " << r;
    const double xs = llama_dot(x.data() + r * kWidth, x.data() + r * kWidth, kWidth) / kWidth;
    EXPECT_NEAR(rstd[static_cast<std::size_t>(r)], 1.0 / std::sqrt(xs + 1e-6), 1e-6);
    for (int64_t j = 0; j < kWidth; ++j) {
      EXPECT_NEAR(yg[r * kWidth + j], y[r * kWidth + j] * g[j], 1e-6);
    }
  }
}

TEST(LlamaKernels, SwigluMatchesItsFormula) {
  std::vector<float> gate, up;
  for (float z = -30.0f; z <= 30.0f; z += 0.37f) {
    gate.push_back(z);
    up.push_back(0.5f + 0.01f * z);
  }
  const auto count = static_cast<int64_t>(gate.size());
  std::vector<float> y(gate.size()), dgate(gate.size()), dup(gate.size());
  const std::vector<float> dy(gate.size(), 2.0f);
  kernels::swiglu_forward(gate.data(), up.data(), count, y.data());
  kernels::swiglu_backward(gate.data(), up.data(), dy.data(), count, dgate.data(), dup.data());
  for (std::size_t i = 0; i < gate.size(); ++i) {
    const double z = gate[i];
    const double s = 1.0 / (1.0 + std::exp(-z));
    const double silu = z * s;
    EXPECT_NEAR(y[i], silu * up[i], 1e-6 * (1.0 + std::fabs(silu * up[i]))) << "z " << z;
    EXPECT_NEAR(dup[i], 2.0 * silu, 1e-6 * (1.0 + std::fabs(silu))) << "z " << z;
    const double dsilu = s * (1.0 + z * (1.0 - s));
    EXPECT_NEAR(dgate[i], 2.0 * up[i] * dsilu, 1e-6 * (1.0 + std::fabs(up[i] * dsilu)))
        << "z " << z;
  }
}

// Random parameters for every slot of `unit`.
std::vector<std::vector<float>> llama_random_params(const Unit& unit, float std, uint64_t seed) {
  std::vector<std::vector<float>> out;
  for (const ParamSpec& spec : unit.params())
    out.push_back(random_values(spec.numel(), std, ++seed));
  return out;
}

std::vector<const float*> llama_ptrs(const std::vector<std::vector<float>>& params) {
  std::vector<const float*> out;
  for (const auto& p : params) out.push_back(p.data());
  return out;
}

// Without positions, causal attention treats the keys before a query as a
// set: swapping the first two rows leaves the later outputs unchanged. The
// rotation makes the scores depend on where each key sits, so a block sees
// the order; with wq = wk = 0 (no scores to rotate) it does not.
TEST(LlamaBlockPositions, AttentionSeesTokenOrderThroughRope) {
  LlamaConfig config;
  config.vocab = 5;
  config.d_model = 8;
  config.heads = 2;
  config.kv_heads = 1;
  config.ffn = 12;
  config.seq_len = 4;
  const LlamaBlock block("block0", config);
  auto params = llama_random_params(block, 0.5f, 80);
  const Batch batch = Batch::make(1, 4, 0);
  const BatchView view = test::view_of(batch);
  const auto x = random_values(4 * 8, 1.0f, 81);
  std::vector<float> swapped = x;
  std::swap_ranges(swapped.begin(), swapped.begin() + 8, swapped.begin() + 8);

  // The largest change of the outputs at positions 2 and 3.
  const auto later_change = [&](const std::vector<std::vector<float>>& p) {
    auto c1 = block.make_context();
    auto c2 = block.make_context();
    const ConstView a = block.forward(*c1, llama_ptrs(p), {&view, {x.data(), 4, 8}, 1.0f});
    const ConstView b = block.forward(*c2, llama_ptrs(p), {&view, {swapped.data(), 4, 8}, 1.0f});
    double change = 0.0;
    for (int64_t i = 2 * 8; i < 4 * 8; ++i) {
      change = std::max(change, std::fabs(static_cast<double>(a.data[i]) - b.data[i]));
    }
    return change;
  };
  EXPECT_GT(later_change(params), 1e-3);
  std::fill(params[1].begin(), params[1].end(), 0.0f);  // wq
  std::fill(params[2].begin(), params[2].end(), 0.0f);  // wk
  EXPECT_LT(later_change(params), 1e-6);
}

ModelSection llama_model_section(int64_t kv_heads) {
  ModelSection s;
  s.name = "llama";
  s.params = toml::parse("vocab = 32\nlayers = 2\nd_model = 16\nheads = 4\nseq_len = 8");
  s.params.insert_or_assign("kv_heads", kv_heads);
  return s;
}

TEST(LlamaShapes, DefaultFfnWidth) {
  EXPECT_EQ(llama_default_ffn(16), 48);
  EXPECT_EQ(llama_default_ffn(64), 176);
  EXPECT_EQ(llama_default_ffn(4096), 10928);
  EXPECT_EQ(llama_default_ffn(3), 8);
}

TEST(LlamaShapes, ParametersWithAndWithoutGroupedQueryAttention) {
  for (const int64_t kv : {int64_t{4}, int64_t{2}, int64_t{1}}) {
    SCOPED_TRACE("kv_heads " + std::to_string(kv));
    const auto model = make_model(llama_model_section(kv), test::model_plugins());
    EXPECT_EQ(model->name(), "llama");
    ASSERT_EQ(model->size(), 4u);
    EXPECT_EQ(model->data_shape().seq_len, 8);
    EXPECT_EQ(model->data_shape().vocab, 32);
    const int64_t kvd = kv * 4;  // head dim 16 / 4
    const int64_t ffn = 48;      // default for d_model 16
    struct Expected {
      std::string name;
      std::vector<int64_t> shape;
      SplitHint split;
    };
    const std::vector<std::pair<std::size_t, std::vector<Expected>>> units = {
        {0, {{"wte", {32, 16}, SplitHint::row}}},
        {1,
         {{"attn_norm_g", {16}, SplitHint::none},
          {"wq", {16, 16}, SplitHint::column},
          {"wk", {16, kvd}, SplitHint::column},
          {"wv", {16, kvd}, SplitHint::column},
          {"wo", {16, 16}, SplitHint::row},
          {"mlp_norm_g", {16}, SplitHint::none},
          {"w_gate", {16, ffn}, SplitHint::column},
          {"w_up", {16, ffn}, SplitHint::column},
          {"w_down", {ffn, 16}, SplitHint::row}}},
        {3, {{"norm_g", {16}, SplitHint::none}, {"w", {16, 32}, SplitHint::column}}},
    };
    for (const auto& [u, expected] : units) {
      const auto specs = model->params(u);
      ASSERT_EQ(specs.size(), expected.size()) << model->unit_name(u);
      for (std::size_t j = 0; j < specs.size(); ++j) {
        EXPECT_EQ(specs[j].name, expected[j].name);
        EXPECT_EQ(specs[j].shape, expected[j].shape) << specs[j].name;
        EXPECT_EQ(specs[j].split, expected[j].split) << specs[j].name;
        EXPECT_TRUE(specs[j].tied_to.empty()) << specs[j].name;
      }
    }
    EXPECT_EQ(model->unit_name(1), "block0");
    EXPECT_EQ(model->unit_name(2), "block1");
    const int64_t block = 16 + 16 * 16 + 2 * 16 * kvd + 16 * 16 + 16 + 3 * 16 * ffn;
    EXPECT_EQ(model->parameter_count(), 32 * 16 + 2 * block + 16 + 16 * 32);
  }
}

TEST(LlamaShapes, InitGivesUnitGainsAndSmallWeights) {
  const auto model = make_model(llama_model_section(2), test::model_plugins());
  ModelParams params(*model);
  params.init(*model, 42);
  for (std::size_t u = 0; u < model->size(); ++u) {
    const auto specs = model->params(u);
    for (std::size_t j = 0; j < specs.size(); ++j) {
      const auto v = std::as_const(params).at({u, j});
      const std::string name = model->unit_name(u) + "." + specs[j].name;
      if (specs[j].name.ends_with("_g")) {
        for (const float x : v) ASSERT_EQ(x, 1.0f) << name;
        continue;
      }
      double sum = 0.0, sq = 0.0;
      for (const float x : v) {
        sum += x;
        sq += static_cast<double>(x) * x;
      }
      const double n = static_cast<double>(v.size());
      const double sd = std::sqrt(sq / n - (sum / n) * (sum / n));
      EXPECT_NEAR(sd, 0.02, 0.004) << name;
      EXPECT_LT(std::fabs(sum / n), 0.004) << name;
    }
  }
  // Blocks draw distinct weights.
  const auto a = std::as_const(params).at({1, 1});
  const auto b = std::as_const(params).at({2, 1});
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// Two threads run whole forward/backward passes through the same units with
// their own contexts and gradient buffers: the bits equal sequential runs.
TEST(LlamaThreads, UnitsAreSharedByThreadsWithDistinctContexts) {
  const auto model = make_model(llama_model_section(2), test::model_plugins());
  ModelParams params(*model);
  params.init(*model, 3);
  std::vector<Batch> batches;
  for (int m = 0; m < 2; ++m) {
    Batch b = Batch::make(3, 8, 0);
    for (std::size_t i = 0; i < b.tokens.size(); ++i) {
      b.tokens[i] = static_cast<int32_t>((i * (7 + m) + 1) % 32);
      b.targets[i] = static_cast<int32_t>((i * (3 + m) + 2) % 32);
    }
    batches.push_back(std::move(b));
  }
  std::vector<ModelParams> sequential, threaded;
  for (int m = 0; m < 2; ++m) {
    sequential.emplace_back(*model);
    threaded.emplace_back(*model);
    reference_forward_backward(*model, params, sequential.back(), batches[m], 1.0f / 24.0f);
  }
  for (int round = 0; round < 5; ++round) {
    for (auto& g : threaded) g.zero();
    std::vector<std::thread> threads;
    for (std::size_t m = 0; m < 2; ++m) {
      threads.emplace_back([&, m] {
        reference_forward_backward(*model, params, threaded[m], batches[m], 1.0f / 24.0f);
      });
    }
    for (auto& t : threads) t.join();
    for (std::size_t m = 0; m < 2; ++m) {
      const auto a = sequential[m].flatten();
      const auto b = threaded[m].flatten();
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "micro-batch " << m << " round " << round;
    }
  }
}

}  // namespace
}  // namespace tessera::model

// The reference trainer on mlp, gpt (tied and untied) and llama:
// determinism, micro-batch accumulation, several live contexts per unit, and
// a whole-model finite-difference check that covers the tied head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../support/models.hpp"
#include "fd_check.hpp"
#include "tessera/core/model/model.hpp"

namespace tessera::model {
namespace {

ModelSection gpt_section(bool tied) {
  ModelSection s;
  s.name = "gpt";
  s.params = toml::parse("vocab = 9\nlayers = 2\nd_model = 8\nheads = 2\nseq_len = 4");
  s.params.insert_or_assign("tied_head", tied);
  return s;
}

ModelSection llama_gqa_section() {
  ModelSection s;
  s.name = "llama";
  s.params = toml::parse(
      "vocab = 9\nlayers = 2\nd_model = 8\nheads = 2\nkv_heads = 1\nseq_len = 4\nffn = 12");
  return s;
}

ModelSection mlp_section() {
  ModelSection s;
  s.name = "mlp";
  s.params = toml::parse("input = 5\nhidden = [7, 6]\nclasses = 4\nactivation = 'gelu'");
  return s;
}

Batch batch_for(const Model& model, int64_t size, uint64_t seed) {
  const DataShape& shape = model.data_shape();
  if (shape.is_sequence()) {
    Batch b = Batch::make(size, shape.seq_len, 0);
    const auto r = testing::random_values(size * shape.seq_len * 2, 1.0f, seed);
    for (std::size_t i = 0; i < b.tokens.size(); ++i) {
      const auto vocab = static_cast<int32_t>(shape.vocab);
      b.tokens[i] = static_cast<int32_t>(std::fabs(r[i]) * 97.0f) % vocab;
      b.targets[i] = static_cast<int32_t>(std::fabs(r[i + b.tokens.size()]) * 97.0f) % vocab;
    }
    return b;
  }
  Batch b = Batch::make(size, 0, shape.features);
  b.inputs = testing::random_values(size * shape.features, 1.0f, seed);
  for (int64_t i = 0; i < size; ++i) {
    b.targets[static_cast<std::size_t>(i)] = static_cast<int32_t>((i * 5 + 1) % shape.classes);
  }
  return b;
}

float scale_for(const Model& model, int64_t size) {
  const int64_t per = model.data_shape().is_sequence() ? model.data_shape().seq_len : 1;
  return 1.0f / static_cast<float>(size * per);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ReferenceModels : public ::testing::TestWithParam<int> {
 protected:
  std::unique_ptr<Model> make() const {
    if (GetParam() == 3) return make_model(llama_gqa_section(), test::model_plugins());
    return make_model(GetParam() == 0 ? mlp_section() : gpt_section(GetParam() == 1),
                      test::model_plugins());
  }
};

TEST_P(ReferenceModels, InitIsAPureFunctionOfTheSeed) {
  const auto model = make();
  ModelParams a(*model), b(*model), c(*model);
  a.init(*model, 42);
  b.init(*model, 42);
  c.init(*model, 43);
  EXPECT_TRUE(same_bits(a.flatten(), b.flatten()));
  EXPECT_FALSE(same_bits(a.flatten(), c.flatten()));
  // Biases zero, gains one, weights small.
  const auto flat = a.flatten();
  double sq = 0.0;
  for (const float v : flat) sq += static_cast<double>(v) * v;
  EXPECT_GT(sq, 0.0);
}

TEST_P(ReferenceModels, ForwardAndBackwardAreBitReproducible) {
  const auto model = make();
  ModelParams params(*model);
  params.init(*model, 7);
  const Batch batch = batch_for(*model, 4, 3);
  ModelParams g1(*model), g2(*model);
  const double l1 = reference_forward_backward(*model, params, g1, batch, scale_for(*model, 4));
  const double l2 = reference_forward_backward(*model, params, g2, batch, scale_for(*model, 4));
  EXPECT_EQ(l1, l2);
  EXPECT_TRUE(same_bits(g1.flatten(), g2.flatten()));
  EXPECT_EQ(reference_loss(*model, params, batch, scale_for(*model, 4)), l1);
}

TEST_P(ReferenceModels, HalvesAccumulateToTheWholeBatch) {
  const auto model = make();
  ModelParams params(*model);
  params.init(*model, 9);
  const Batch batch = batch_for(*model, 6, 4);
  const float scale = scale_for(*model, 6);
  ModelParams whole(*model), parts(*model);
  const double loss = reference_forward_backward(*model, params, whole, batch, scale);
  double part_loss = 0.0;
  for (const Batch& half : split_batch(batch, 2)) {
    part_loss += reference_forward_backward(*model, params, parts, half, scale);
  }
  EXPECT_NEAR(part_loss, loss, 1e-6 * std::fabs(loss));
  const auto a = whole.flatten();
  const auto b = parts.flatten();
  ASSERT_EQ(a.size(), b.size());
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(a[i]) * a[i];
  }
  EXPECT_GT(norm, 0.0);
  EXPECT_LE(std::sqrt(diff), 1e-6 * std::sqrt(norm));
}

TEST_P(ReferenceModels, SeveralLiveContextsPerUnit) {
  // Two micro-batches forward first, backward later in reverse order (as a
  // pipeline schedule would): same gradients as one after the other.
  const auto model = make();
  ModelParams params(*model);
  params.init(*model, 5);
  const Batch batch = batch_for(*model, 4, 6);
  const auto halves = split_batch(batch, 2);
  const float scale = scale_for(*model, 4);
  ModelParams sequential(*model), interleaved(*model);
  for (const Batch& h : halves) reference_forward_backward(*model, params, sequential, h, scale);

  std::vector<std::vector<Model::Context>> ctx(2);
  for (std::size_t m = 0; m < 2; ++m) {
    ConstView x;
    for (std::size_t i = 0; i < model->size(); ++i) {
      ctx[m].push_back(model->make_context(i));
      x = model->forward(i, ctx[m][i], params.unit_const(i), halves[m], x, scale);
      EXPECT_GT(ctx[m][i].bytes(), 0u) << model->unit_name(i);
    }
  }
  for (std::size_t m = 2; m-- > 0;) {
    ConstView g;
    for (std::size_t i = model->size(); i-- > 0;) {
      g = model->backward(i, ctx[m][i], params.unit_const(i), interleaved.unit(i), g);
    }
  }
  const auto a = sequential.flatten();
  const auto b = interleaved.flatten();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-6f * (1.0f + std::fabs(a[i]))) << "element " << i;
  }
}

TEST_P(ReferenceModels, WholeModelGradientMatchesFiniteDifferences) {
  // Every owned parameter of the first and last units (for the tied gpt the
  // embedding table gets gradient from both ends).
  const auto model = make();
  ModelParams params(*model);
  params.init(*model, 11);
  // Larger values than init so every term matters.
  for (std::size_t i = 0; i < model->size(); ++i) {
    for (std::size_t j = 0; j < model->params(i).size(); ++j) {
      if (!(model->owner(i, j) == ParamRef{i, j})) continue;
      const auto v = params.at({i, j});
      const auto r = testing::random_values(static_cast<int64_t>(v.size()), 0.4f, 100 + i * 16 + j);
      std::copy(r.begin(), r.end(), v.begin());
    }
  }
  const Batch batch = batch_for(*model, 3, 8);
  const float scale = scale_for(*model, 3);
  ModelParams grads(*model);
  reference_forward_backward(*model, params, grads, batch, scale);
  for (const std::size_t u : {std::size_t{0}, model->size() - 1}) {
    for (std::size_t j = 0; j < model->params(u).size(); ++j) {
      const ParamRef ref = model->owner(u, j);
      if (!(ref == ParamRef{u, j})) continue;
      const auto values = params.at(ref);
      const auto analytic = grads.at(ref);
      double diff = 0.0, norm = 0.0;
      for (std::size_t k = 0; k < values.size(); ++k) {
        const float saved = values[k];
        const float eps = 1e-2f;
        values[k] = saved + eps;
        const double plus = reference_loss(*model, params, batch, scale);
        values[k] = saved - eps;
        const double minus = reference_loss(*model, params, batch, scale);
        values[k] = saved;
        const double fd = (plus - minus) / (2.0 * eps);
        diff += (fd - analytic[k]) * (fd - analytic[k]);
        norm += fd * fd;
      }
      EXPECT_GT(norm, 0.0);
      EXPECT_LE(std::sqrt(diff), 1e-2 * std::sqrt(norm) + 1e-4)
          << model->unit_name(u) << "." << model->params(u)[j].name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(MlpTiedGptUntiedGpt, ReferenceModels, ::testing::Values(0, 1, 2));
INSTANTIATE_TEST_SUITE_P(LlamaGroupedQuery, ReferenceModels, ::testing::Values(3));

}  // namespace
}  // namespace tessera::model

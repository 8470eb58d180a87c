// Finite-difference checks of the llama's units and of a whole llama, and
// the errors of its [model] keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "../support/models.hpp"
#include "fd_check.hpp"
#include "llama.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {
namespace {

using testing::expect_gradients_match;
using testing::random_values;

Batch llama_batch(int64_t size, int64_t seq, int64_t vocab) {
  Batch batch = Batch::make(size, seq, 0);
  for (std::size_t i = 0; i < batch.tokens.size(); ++i) {
    batch.tokens[i] = static_cast<int32_t>((i * 5 + 1) % static_cast<std::size_t>(vocab));
    batch.targets[i] = static_cast<int32_t>((i * 3 + 2) % static_cast<std::size_t>(vocab));
  }
  return batch;
}

LlamaConfig llama_shape(int64_t d_model, int64_t heads, int64_t kv_heads, int64_t ffn,
                        int64_t seq_len) {
  LlamaConfig c;
  c.vocab = 9;
  c.layers = 1;
  c.d_model = d_model;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.ffn = ffn;
  c.seq_len = seq_len;
  return c;
}

TEST(LlamaGradients, Embedding) {
  const LlamaEmbedding unit("embed", llama_shape(4, 2, 2, 8, 5));
  const Batch batch = llama_batch(2, 5, 9);
  expect_gradients_match(unit, batch, {}, 0, 0.5f, 1e-2f, 51);
}

TEST(LlamaGradients, BlockMultiHead) {
  const LlamaBlock unit("block0", llama_shape(8, 2, 2, 12, 6));
  ASSERT_EQ(unit.params()[2].shape, (std::vector<int64_t>{8, 8}));
  const Batch batch = llama_batch(2, 4, 9);
  expect_gradients_match(unit, batch, random_values(2 * 4 * 8, 1.0f, 52), 8, 0.4f, 1e-2f, 53);
}

TEST(LlamaGradients, BlockGroupedQuery) {
  // Four query heads share two key/value heads (two per group).
  const LlamaBlock unit("block1", llama_shape(16, 4, 2, 10, 5));
  ASSERT_EQ(unit.params()[2].shape, (std::vector<int64_t>{16, 8}));
  const Batch batch = llama_batch(2, 5, 9);
  expect_gradients_match(unit, batch, random_values(2 * 5 * 16, 1.0f, 54), 16, 0.4f, 1e-2f, 55);
}

TEST(LlamaGradients, BlockOneKeyValueHeadShorterSequence) {
  // Multi-query attention on a batch shorter than seq_len.
  const LlamaBlock unit("block2", llama_shape(12, 3, 1, 8, 7));
  ASSERT_EQ(unit.params()[3].shape, (std::vector<int64_t>{12, 4}));
  const Batch batch = llama_batch(1, 6, 9);
  expect_gradients_match(unit, batch, random_values(6 * 12, 1.0f, 56), 12, 0.4f, 1e-2f, 57);
}

TEST(LlamaGradients, Head) {
  const LlamaHead unit("head", llama_shape(6, 3, 3, 8, 4));
  const Batch batch = llama_batch(2, 3, 9);
  expect_gradients_match(unit, batch, random_values(2 * 3 * 6, 1.0f, 58), 6, 0.5f, 1e-2f, 59);
}

// Every parameter of a whole two-block llama with grouped-query attention
// against central differences of the scaled loss.
TEST(LlamaGradients, WholeModel) {
  ModelSection s;
  s.name = "llama";
  s.params = toml::parse(
      "vocab = 9\nlayers = 2\nd_model = 8\nheads = 2\nkv_heads = 1\nseq_len = 4\nffn = 12");
  const auto model = make_model(s, test::model_plugins());
  ASSERT_EQ(model->size(), 4u);
  ModelParams params(*model);
  for (std::size_t i = 0; i < model->size(); ++i) {
    for (std::size_t j = 0; j < model->params(i).size(); ++j) {
      const auto v = params.at({i, j});
      const auto r = random_values(static_cast<int64_t>(v.size()), 0.4f, 200 + i * 16 + j);
      std::copy(r.begin(), r.end(), v.begin());
    }
  }
  const Batch batch = llama_batch(3, 4, 9);
  const float scale = 1.0f / 12.0f;
  ModelParams grads(*model);
  reference_forward_backward(*model, params, grads, batch, scale);
  for (std::size_t u = 0; u < model->size(); ++u) {
    for (std::size_t j = 0; j < model->params(u).size(); ++j) {
      const auto values = params.at({u, j});
      const auto analytic = std::as_const(grads).at({u, j});
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
      const std::string name = model->unit_name(u) + "." + model->params(u)[j].name;
      EXPECT_GT(std::sqrt(norm), 1e-6) << name;
      EXPECT_LE(std::sqrt(diff), 1e-2 * std::sqrt(norm) + 1e-4) << name;
    }
  }
}

ModelSection llama_section(std::string_view toml_text) {
  ModelSection s;
  s.name = "llama";
  s.params = toml::parse(toml_text);
  s.params_where = "run.toml: [model]";
  return s;
}

// The message of the error make_model throws (empty when it does not).
std::string llama_error_of(const ModelSection& s) {
  try {
    (void)make_model(s, test::model_plugins());
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  return {};
}

constexpr std::string_view kLlamaBase = "vocab = 11\nlayers = 1\nd_model = 8\nseq_len = 4\n";

TEST(LlamaConfig, ErrorsNameTheKeyAndWhere) {
  const std::string unknown =
      llama_error_of(llama_section(std::string(kLlamaBase) + "heads = 2\nmlp_ratio = 4"));
  EXPECT_NE(unknown.find("run.toml: [model]: unknown option 'mlp_ratio' (line 6)"),
            std::string::npos)
      << unknown;
  EXPECT_NE(unknown.find("kv_heads"), std::string::npos) << unknown;  // lists the known keys

  const std::string kv =
      llama_error_of(llama_section(std::string(kLlamaBase) + "heads = 4\nkv_heads = 3"));
  EXPECT_NE(kv.find("run.toml: [model]"), std::string::npos) << kv;
  EXPECT_NE(kv.find("key 'kv_heads' (3) must divide key 'heads' (4)"), std::string::npos) << kv;
  EXPECT_NE(llama_error_of(llama_section(std::string(kLlamaBase) + "heads = 2\nkv_heads = 4"))
                .find("key 'kv_heads' (4) must divide"),
            std::string::npos);
  EXPECT_NE(llama_error_of(llama_section(std::string(kLlamaBase) + "heads = 2\nkv_heads = -1"))
                .find("key 'kv_heads' must be >= 0"),
            std::string::npos);

  const std::string odd = llama_error_of(llama_section(std::string(kLlamaBase) + "heads = 8"));
  EXPECT_NE(odd.find("odd head dimension (1)"), std::string::npos) << odd;
  EXPECT_NE(odd.find("'heads'"), std::string::npos) << odd;
  EXPECT_NE(llama_error_of(llama_section(std::string(kLlamaBase) + "heads = 3"))
                .find("key 'heads' (3) must divide key 'd_model' (8)"),
            std::string::npos);

  EXPECT_NE(llama_error_of(llama_section(std::string(kLlamaBase) + "heads = 2\nrope_theta = 0"))
                .find("key 'rope_theta' must be > 0"),
            std::string::npos);
  EXPECT_NE(llama_error_of(llama_section(std::string(kLlamaBase) + "heads = 2\nnorm_eps = 'x'"))
                .find("option 'norm_eps' (line 6) must be a float, got a string"),
            std::string::npos);
  EXPECT_NE(llama_error_of(llama_section(std::string(kLlamaBase) + "heads = 2\nffn = -3"))
                .find("key 'ffn' must be >= 0"),
            std::string::npos);
  // Absent keys take the declared defaults: kv_heads = heads, ffn from d_model.
  const auto defaults =
      make_model(llama_section("d_model = 24\nheads = 2\nlayers = 1"), test::model_plugins());
  EXPECT_EQ(defaults->data_shape().seq_len, 32);
  EXPECT_EQ(defaults->params(1)[2].shape, (std::vector<int64_t>{24, 24}));  // wk: all heads
  EXPECT_EQ(defaults->params(1)[6].shape, (std::vector<int64_t>{24, 64}));  // w_gate: ffn 64
  // Valid: an integer rope_theta is a number.
  EXPECT_EQ(llama_error_of(llama_section(std::string(kLlamaBase) +
                                         "heads = 2\nrope_theta = 500000\nnorm_eps = 1e-6")),
            "");
}

}  // namespace
}  // namespace tessera::model

// Building models from the [model] section (the model plugins' declared
// options) and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "../support/models.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {
namespace {

ModelSection section(const std::string& name, std::string_view toml_text) {
  ModelSection s;
  s.name = name;
  s.params = toml::parse(toml_text);
  s.params_where = "run.toml:[model]";
  return s;
}

// The message of the error make_model throws (empty when it does not).
std::string error_of(const ModelSection& s) {
  try {
    (void)make_model(s, test::model_plugins());
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  return {};
}

TEST(ModelConfig, BuildsMlpUnits) {
  const auto model =
      make_model(section("mlp", "input = 4\nhidden = [8, 6]\nclasses = 3\nactivation = 'gelu'"),
                 test::model_plugins());
  ASSERT_EQ(model->size(), 3u);
  EXPECT_EQ(model->unit_name(0), "layer0");
  EXPECT_EQ(model->unit_name(2), "head");
  EXPECT_EQ(model->data_shape().features, 4);
  EXPECT_EQ(model->data_shape().classes, 3);
  EXPECT_EQ(model->parameter_count(), 4 * 8 + 8 + 8 * 6 + 6 + 6 * 3 + 3);
  EXPECT_EQ(model->params(0)[0].split, SplitHint::column);
  EXPECT_EQ(model->params(0)[0].split_blocks, 1);
  EXPECT_EQ(model->interface().major, TESSERA_MODEL_API_MAJOR);
}

TEST(ModelConfig, AbsentKeysTakeTheDeclaredDefaults) {
  const auto mlp = make_model(section("mlp", ""), test::model_plugins());
  EXPECT_EQ(mlp->data_shape().features, 32);
  EXPECT_EQ(mlp->data_shape().classes, 10);
  EXPECT_EQ(mlp->size(), 2u);  // hidden = [64]
  const auto gpt = make_model(section("gpt", "layers = 1"), test::model_plugins());
  EXPECT_EQ(gpt->data_shape().seq_len, 32);
  EXPECT_EQ(gpt->data_shape().vocab, 256);
  EXPECT_EQ(gpt->size(), 3u);
}

TEST(ModelConfig, MlpWithoutHiddenLayersIsOneHead) {
  const auto model =
      make_model(section("mlp", "input = 4\nhidden = []\nclasses = 2"), test::model_plugins());
  ASSERT_EQ(model->size(), 1u);
  EXPECT_EQ(model->unit_name(0), "head");
}

TEST(ModelConfig, BuildsTiedAndUntiedGpt) {
  const auto tied = make_model(
      section("gpt",
              "vocab = 11\nlayers = 2\nd_model = 8\nheads = 2\nseq_len = 5\ntied_head = true"),
      test::model_plugins());
  ASSERT_EQ(tied->size(), 4u);
  EXPECT_EQ(tied->unit_name(1), "block0");
  EXPECT_EQ(tied->params(3)[2].tied_to, "embed.wte");
  EXPECT_EQ(tied->owner(3, 2), (ParamRef{0, 0}));
  const auto untied = make_model(
      section("gpt",
              "vocab = 11\nlayers = 2\nd_model = 8\nheads = 2\nseq_len = 5\ntied_head = false"),
      test::model_plugins());
  EXPECT_EQ(untied->owner(3, 2), (ParamRef{3, 2}));
  EXPECT_EQ(untied->parameter_count(), tied->parameter_count() + 11 * 8);
  EXPECT_EQ(tied->data_shape().seq_len, 5);
  EXPECT_EQ(tied->data_shape().vocab, 11);
}

TEST(ModelConfig, ErrorsNameTheKey) {
  const std::string typo =
      error_of(section("mlp", "input = 4\nhidden = [8]\nclasses = 3\nwidht = 2"));
  EXPECT_NE(typo.find("run.toml:[model]: unknown option 'widht' (line 4)"), std::string::npos)
      << typo;
  EXPECT_NE(typo.find("declared: input, hidden, classes, activation"), std::string::npos) << typo;
  EXPECT_NE(error_of(section("mlp", "input = 4\nhidden = [8, 'x']")).find("option 'hidden'"),
            std::string::npos);
  EXPECT_NE(error_of(section("mlp", "input = 4\nhidden = [0]\nclasses = 3")).find("'hidden'"),
            std::string::npos);
  EXPECT_NE(error_of(section("mlp", "input = 4\nhidden = [8]\nclasses = 3\nactivation = 'tanh'"))
                .find("'activation'"),
            std::string::npos);
  EXPECT_NE(error_of(section("gpt", "vocab = 11\nlayers = 1\nd_model = 8\nheads = 3\nseq_len = 4"))
                .find("'heads'"),
            std::string::npos);
  EXPECT_NE(error_of(section("gpt",
                             "vocab = 11\nlayers = 1\nd_model = 8\nheads = 2\nseq_len = "
                             "4\ntied_head = 1"))
                .find("'tied_head'"),
            std::string::npos);
  const std::string range = error_of(section("gpt", "vocab = 1"));
  EXPECT_NE(range.find("run.toml:[model]: model 'gpt': key 'vocab' must be >= 2, got 1"),
            std::string::npos)
      << range;
  const std::string unknown = error_of(section("resnet", ""));
  EXPECT_NE(unknown.find("run.toml:[model]: key 'name' names unknown model 'resnet'"),
            std::string::npos)
      << unknown;
  EXPECT_NE(unknown.find("(available: gpt, llama, mlp)"), std::string::npos) << unknown;
}

// Sizes past what any run can hold are refused before anything is built,
// naming the keys: one size past 2^40, more than 65536 layers (or mlp
// widths), and sizes each in range whose parameters come to more than 2^40.
TEST(ModelConfig, SizesBeyondReachAreRefusedNamingTheKeys) {
  const std::string vocab = error_of(section(
      "gpt", "vocab = 4611686018427387904\nlayers = 1\nd_model = 16\nheads = 2\nseq_len = 8"));
  EXPECT_NE(vocab.find("model 'gpt': key 'vocab' must be <= 1099511627776, got "
                       "4611686018427387904"),
            std::string::npos)
      << vocab;
  const std::string layers = error_of(
      section("gpt", "vocab = 32\nlayers = 1000000000\nd_model = 16\nheads = 2\nseq_len = 8"));
  EXPECT_NE(layers.find("key 'layers' must be <= 65536, got 1000000000"), std::string::npos)
      << layers;
  const std::string gpt = error_of(
      section("gpt", "vocab = 32\nlayers = 1\nd_model = 1073741824\nheads = 1\nseq_len = 8"));
  EXPECT_NE(gpt.find("model 'gpt': keys 'vocab', 'layers', 'd_model', 'seq_len' and 'mlp_ratio' "
                     "make "),
            std::string::npos)
      << gpt;
  EXPECT_NE(gpt.find("parameters, more than 2^40 = 1099511627776 (4 TiB in f32)"),
            std::string::npos)
      << gpt;
  const std::string llama = error_of(section(
      "llama",
      "vocab = 32\nlayers = 1\nd_model = 4294967296\nheads = 2147483648\nkv_heads = 2147483648\n"
      "seq_len = 8"));
  EXPECT_NE(llama.find("model 'llama': keys 'vocab', 'layers', 'd_model', 'kv_heads' and 'ffn'"),
            std::string::npos)
      << llama;
  const std::string mlp =
      error_of(section("mlp", "input = 12\nhidden = [4611686018427387904]\nclasses = 6"));
  EXPECT_NE(mlp.find("key 'hidden' item 0 must be in [1, 1099511627776]"), std::string::npos)
      << mlp;
  const std::string wide =
      error_of(section("mlp", "input = 1048576\nhidden = [1048576, 1048576]\nclasses = 6"));
  EXPECT_NE(wide.find("keys 'input', 'hidden' and 'classes' make "), std::string::npos) << wide;
  // Small sizes still build.
  EXPECT_EQ(error_of(section("mlp", "input = 1\nhidden = [1]\nclasses = 2")), "");
}

// Every unit of every in-tree model reports a cost (the estimate the
// pipeline balancer and the selector read through the model table), and it
// grows the way the architecture says: attention with the sequence length,
// GEMMs with the width.
TEST(ModelCost, EveryUnitReportsAPlausibleCost) {
  for (const auto& [name, params] : std::vector<std::pair<std::string, std::string>>{
           {"mlp", "input = 4\nhidden = [8, 6]\nclasses = 3"},
           {"gpt", "vocab = 11\nlayers = 2\nd_model = 8\nheads = 2\nseq_len = 5"},
           {"llama",
            "vocab = 11\nlayers = 2\nd_model = 8\nheads = 2\nkv_heads = 1\nseq_len = 5"}}) {
    const auto model = make_model(section(name, params), test::model_plugins());
    int64_t total = 0;
    for (std::size_t u = 0; u < model->size(); ++u) {
      const tessera_unit_cost c = model->unit_cost(u);
      EXPECT_GT(c.forward_flops, 0.0) << name << " " << model->unit_name(u);
      EXPECT_GE(c.backward_flops, c.forward_flops) << name << " " << model->unit_name(u);
      EXPECT_GT(c.activation_bytes, 0.0) << name << " " << model->unit_name(u);
      total += c.params;
    }
    EXPECT_EQ(total, model->parameter_count()) << name;
  }
  const auto short_gpt =
      make_model(section("gpt", "vocab = 11\nlayers = 1\nd_model = 8\nheads = 2\nseq_len = 4"),
                 test::model_plugins());
  const auto long_gpt =
      make_model(section("gpt", "vocab = 11\nlayers = 1\nd_model = 8\nheads = 2\nseq_len = 8"),
                 test::model_plugins());
  // Twice the tokens: more than twice the block's work (attention is
  // quadratic), exactly twice the head's.
  EXPECT_GT(long_gpt->unit_cost(1).forward_flops, 2.0 * short_gpt->unit_cost(1).forward_flops);
  EXPECT_DOUBLE_EQ(long_gpt->unit_cost(2).forward_flops,
                   2.0 * short_gpt->unit_cost(2).forward_flops);
}

TEST(ModelSplits, FusedQkvDeclaresThreeBlocks) {
  const auto gpt =
      make_model(section("gpt", "vocab = 11\nlayers = 1\nd_model = 8\nheads = 2\nseq_len = 4"),
                 test::model_plugins());
  const auto block = gpt->params(1);
  const auto qkv = std::find_if(block.begin(), block.end(),
                                [](const ParamSpec& p) { return p.name == "attn_qkv_w"; });
  ASSERT_NE(qkv, block.end());
  EXPECT_EQ(qkv->split, SplitHint::column);
  EXPECT_EQ(qkv->split_blocks, 3);
  for (const ParamSpec& p : block) {
    if (p.name != "attn_qkv_w" && p.name != "attn_qkv_b") {
      EXPECT_EQ(p.split_blocks, 1) << p.name;
    }
  }
}

}  // namespace
}  // namespace tessera::model

// Building models from the [model] section and its errors.
#include <gtest/gtest.h>

#include <string>

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
    (void)make_model(s);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  return {};
}

TEST(ModelConfig, BuildsMlpUnits) {
  const auto model =
      make_model(section("mlp", "input = 4\nhidden = [8, 6]\nclasses = 3\nactivation = 'gelu'"));
  ASSERT_EQ(model->size(), 3u);
  EXPECT_EQ(model->unit(0).name(), "layer0");
  EXPECT_EQ(model->unit(2).name(), "head");
  EXPECT_EQ(model->data_shape().features, 4);
  EXPECT_EQ(model->data_shape().classes, 3);
  EXPECT_EQ(model->parameter_count(), 4 * 8 + 8 + 8 * 6 + 6 + 6 * 3 + 3);
  EXPECT_EQ(model->unit(0).params()[0].split, SplitHint::column);
}

TEST(ModelConfig, MlpWithoutHiddenLayersIsOneHead) {
  const auto model = make_model(section("mlp", "input = 4\nhidden = []\nclasses = 2"));
  ASSERT_EQ(model->size(), 1u);
  EXPECT_TRUE(model->unit(0).is_first());
  EXPECT_TRUE(model->unit(0).is_last());
}

TEST(ModelConfig, BuildsTiedAndUntiedGpt) {
  const auto tied = make_model(section(
      "gpt", "vocab = 11\nlayers = 2\nd_model = 8\nheads = 2\nseq_len = 5\ntied_head = true"));
  ASSERT_EQ(tied->size(), 4u);
  EXPECT_EQ(tied->unit(1).name(), "block0");
  EXPECT_EQ(tied->owner(3, 2), (ParamRef{0, 0}));
  const auto untied = make_model(section(
      "gpt", "vocab = 11\nlayers = 2\nd_model = 8\nheads = 2\nseq_len = 5\ntied_head = false"));
  EXPECT_EQ(untied->owner(3, 2), (ParamRef{3, 2}));
  EXPECT_EQ(untied->parameter_count(), tied->parameter_count() + 11 * 8);
  EXPECT_EQ(tied->data_shape().seq_len, 5);
  EXPECT_EQ(tied->data_shape().vocab, 11);
}

TEST(ModelConfig, ErrorsNameTheKey) {
  EXPECT_NE(error_of(section("mlp", "input = 4\nhidden = [8]\nclasses = 3\nwidth = 2"))
                .find("key 'width' is unknown"),
            std::string::npos);
  EXPECT_NE(error_of(section("mlp", "input = 4\nhidden = [8]")).find("key 'classes' is missing"),
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
  EXPECT_NE(error_of(section("gpt", "vocab = 11\nlayers = 1\nd_model = 8\nheads = 2"))
                .find("'seq_len' is missing"),
            std::string::npos);
  const std::string unknown = error_of(section("resnet", ""));
  EXPECT_NE(unknown.find("resnet"), std::string::npos);
  EXPECT_NE(unknown.find("run.toml:[model]"), std::string::npos);
}

}  // namespace
}  // namespace tessera::model

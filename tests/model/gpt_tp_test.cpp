// The gpt under tensor parallelism: the embedding and head split by
// vocabulary (tied and untied), a block split by heads and MLP columns, and
// whole small models, on 2, 3 and 4 in-memory ranks against the whole units
// on one rank; a group of one rank changes nothing; sizes that do not
// divide are refused naming the key and the group size.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../support/models.hpp"
#include "gpt.hpp"
#include "tessera/sdk/error.hpp"
#include "tp_check.hpp"

namespace tessera::model {
namespace {

using testing::expect_model_tp_matches;
using testing::expect_tp_one_is_identical;
using testing::expect_unit_tp_matches;
using testing::tp_forward_error;

// Divisible by 2, 3 and 4: vocab 12, 12 heads of 2 (d = 24), MLP 2·d.
constexpr int64_t kTpVocab = 12;
constexpr int64_t kTpD = 24;
constexpr int64_t kTpHeads = 12;
constexpr int64_t kTpSeq = 5;

Batch gpt_tp_batch() {
  Batch batch = Batch::make(2, 5, 0);
  for (std::size_t i = 0; i < batch.tokens.size(); ++i) {
    batch.tokens[i] = static_cast<int32_t>((i * 5 + 1) % kTpVocab);
    batch.targets[i] = static_cast<int32_t>((i * 7 + 2) % kTpVocab);
  }
  return batch;
}

GptConfig gpt_tp_config(bool tied) {
  GptConfig config;
  config.vocab = kTpVocab;
  config.layers = 2;
  config.d_model = kTpD;
  config.heads = kTpHeads;
  config.seq_len = kTpSeq;
  config.tied_head = tied;
  config.mlp_ratio = 2;
  return config;
}

TEST(GptTensorParallel, Embedding) {
  const GptEmbedding unit("embed", kTpVocab, kTpD, kTpSeq);
  for (const int tp : {2, 3, 4}) {
    expect_unit_tp_matches(unit, gpt_tp_batch(), 0, tp, 201);
    expect_unit_tp_matches(unit, gpt_tp_batch(), 0, tp, 202, true);
  }
}

TEST(GptTensorParallel, Block) {
  const GptBlock unit("block0", kTpD, kTpHeads, 2, kTpSeq);
  for (const int tp : {2, 3, 4}) {
    expect_unit_tp_matches(unit, gpt_tp_batch(), kTpD, tp, 203);
    expect_unit_tp_matches(unit, gpt_tp_batch(), kTpD, tp, 204, true);
  }
}

TEST(GptTensorParallel, UntiedAndTiedHead) {
  for (const char* tie : {"", "embed.wte"}) {
    const GptHead unit("head", kTpVocab, kTpD, tie, kTpSeq);
    for (const int tp : {2, 3, 4}) {
      expect_unit_tp_matches(unit, gpt_tp_batch(), kTpD, tp, 205);
      expect_unit_tp_matches(unit, gpt_tp_batch(), kTpD, tp, 206, true);
    }
  }
}

TEST(GptTensorParallel, WholeModelTiedAndUntied) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied head" : "untied head");
    const auto units = build_gpt_units(gpt_tp_config(tied));
    for (const int tp : {2, 3, 4}) expect_model_tp_matches(units, gpt_tp_batch(), tp, 207);
  }
}

TEST(GptTensorParallel, ThroughThePluginTable) {
  // The plugin's adapter gives backward the group of its own call.
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied head" : "untied head");
    const auto model = tessera::test::build_model(
        "gpt", std::string("vocab = 12\nlayers = 2\nd_model = 24\nheads = 12\nseq_len = 5\n"
                           "mlp_ratio = 2\ntied_head = ") +
                   (tied ? "true" : "false"));
    const auto units = build_gpt_units(gpt_tp_config(tied));
    for (const int tp : {2, 4})
      expect_model_tp_matches(units, gpt_tp_batch(), tp, 211, model.get());
  }
}

TEST(GptTensorParallel, PluginNamesTheModelUnitAndKey) {
  const auto model = tessera::test::build_model(
      "gpt", "vocab = 12\nlayers = 2\nd_model = 24\nheads = 12\nseq_len = 5\nmlp_ratio = 2\n");
  const auto units = build_gpt_units(gpt_tp_config(true));
  try {
    expect_model_tp_matches(units, gpt_tp_batch(), 5, 212, model.get());
    ADD_FAILURE() << "a group of 5 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << e.what();
    EXPECT_NE(std::string(e.what()).find("model 'gpt' unit 'embed' forward: unit 'embed': key "
                                         "'vocab' (12) is not divisible by the tensor-parallel "
                                         "group size 5"),
              std::string::npos)
        << e.what();
  }
}

TEST(GptTensorParallel, BackwardInAnotherGroupSizeIsRefused) {
  // The block's forward runs in a group of 2; its backward without one.
  const GptBlock unit("block0", kTpD, kTpHeads, 2, kTpSeq);
  const Batch batch = gpt_tp_batch();
  const BatchView view = tessera::test::view_of(batch);
  const int64_t rows = batch.size * batch.seq_len;
  std::vector<std::vector<float>> shards;
  // Split tensors as halves, replicated ones (the norms, the row biases) whole.
  for (const ParamSpec& s : unit.params()) {
    shards.emplace_back(s.split == SplitHint::none ? s.numel() : s.numel() / 2, 0.5f);
  }
  std::vector<const float*> p;
  p.reserve(shards.size());
  for (const auto& v : shards) p.push_back(v.data());
  std::vector<float> x(static_cast<std::size_t>(rows * kTpD), 0.25f);
  std::vector<std::string> messages(2);
  testing::run_tp_ranks(2, [&](int rank, const tessera_tp_group& group) {
    std::vector<std::vector<float>> grads(shards.size());
    std::vector<float*> g;
    g.reserve(shards.size());
    for (std::size_t i = 0; i < shards.size(); ++i) {
      grads[i].assign(shards[i].size(), 0.0f);
      g.push_back(grads[i].data());
    }
    auto ctx = unit.make_context();
    ctx->set_tp(&group);
    UnitInput in;
    in.batch = &view;
    in.tp = &group;
    in.x = {x.data(), rows, kTpD};
    const ConstView out = unit.forward(*ctx, p, in);
    const std::vector<float> dy(out.data, out.data + out.rows * out.cols);
    ctx->set_tp(nullptr);
    try {
      (void)unit.backward(*ctx, p, g, {dy.data(), out.rows, out.cols});
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
      messages[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("unit 'block0': backward in a tensor-parallel group of 1 ranks after a "
                     "forward in one of 2"),
              std::string::npos)
        << m;
  }
}

TEST(GptTensorParallel, GroupOfOneIsBitIdentical) {
  const GptEmbedding embed("embed", kTpVocab, kTpD, kTpSeq);
  const GptBlock block("block0", kTpD, kTpHeads, 2, kTpSeq);
  const GptHead head("head", kTpVocab, kTpD, "", kTpSeq);
  expect_tp_one_is_identical(embed, gpt_tp_batch(), 0, 208);
  expect_tp_one_is_identical(block, gpt_tp_batch(), kTpD, 209);
  expect_tp_one_is_identical(head, gpt_tp_batch(), kTpD, 210);
}

TEST(GptTensorParallel, SizesThatDoNotDivideAreRefused) {
  // 12 heads and a vocabulary of 12 do not split 5 ways; 2 heads not 4 ways.
  const GptBlock block("block0", kTpD, 2, 2, kTpSeq);
  EXPECT_NE(tp_forward_error(block, gpt_tp_batch(), kTpD, 4, TESSERA_ERR_INVALID_ARGUMENT)
                .find("unit 'block0': key 'heads' (2) is not divisible by the tensor-parallel "
                      "group size 4"),
            std::string::npos);
  const GptEmbedding embed("embed", kTpVocab, kTpD, kTpSeq);
  EXPECT_NE(tp_forward_error(embed, gpt_tp_batch(), 0, 5, TESSERA_ERR_INVALID_ARGUMENT)
                .find("unit 'embed': key 'vocab' (12) is not divisible by the tensor-parallel "
                      "group size 5"),
            std::string::npos);
  const GptHead head("head", kTpVocab, kTpD, "embed.wte", kTpSeq);
  EXPECT_NE(tp_forward_error(head, gpt_tp_batch(), kTpD, 5, TESSERA_ERR_INVALID_ARGUMENT)
                .find("unit 'head': key 'vocab' (12) is not divisible by the tensor-parallel "
                      "group size 5"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::model

// The gpt under tensor parallelism: the embedding and head split by
// vocabulary (tied and untied), a block split by heads and MLP columns, and
// whole small models, on 2, 3 and 4 in-memory ranks against the whole units
// on one rank; a group of one rank changes nothing; sizes that do not
// divide are refused naming the key and the group size. Under sequence
// parallelism (TESSERA_TP_SEQUENCE) the same on each rank's positions, the
// replicated gradients summed over the ranks, and a block's saved
// activations shrink by the formula.
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
  // Split tensors as halves, replicated ones (the norms, the row biases) whole.
  const testing::ConstantParams params = testing::constant_params(unit, 2, 0.5f);
  const std::vector<const float*>& p = params.ptrs;
  std::vector<float> x(static_cast<std::size_t>(rows * kTpD), 0.25f);
  std::vector<std::string> messages(2);
  testing::run_tp_ranks(2, [&](int rank, const tessera_tp_group& group) {
    testing::ConstantParams grads = testing::constant_params(unit, 2, 0.0f);
    std::vector<float*> g;
    for (auto& v : grads.values) g.push_back(v.data());
    auto ctx = unit.make_context();
    const ConstView out = testing::forward_in_group(unit, *ctx, p, view, group, x, rows);
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

// Sequence parallelism splits the 12 positions of each example 2, 3 or 4
// ways.
constexpr int64_t kSpSeq = 12;

Batch gpt_sp_batch() {
  Batch batch = Batch::make(2, kSpSeq, 0);
  for (std::size_t i = 0; i < batch.tokens.size(); ++i) {
    batch.tokens[i] = static_cast<int32_t>((i * 5 + 3) % kTpVocab);
    batch.targets[i] = static_cast<int32_t>((i * 7 + 1) % kTpVocab);
  }
  return batch;
}

GptConfig gpt_sp_config(bool tied) {
  GptConfig config = gpt_tp_config(tied);
  config.seq_len = kSpSeq;
  return config;
}

TEST(GptSequenceParallel, Units) {
  const GptEmbedding embed("embed", kTpVocab, kTpD, kSpSeq);
  const GptBlock block("block0", kTpD, kTpHeads, 2, kSpSeq);
  const GptHead untied("head", kTpVocab, kTpD, "", kSpSeq);
  const GptHead tied("head", kTpVocab, kTpD, "embed.wte", kSpSeq);
  for (const int tp : {2, 3, 4}) {
    for (const bool halves : {false, true}) {
      expect_unit_tp_matches(embed, gpt_sp_batch(), 0, tp, 301, halves, true);
      expect_unit_tp_matches(block, gpt_sp_batch(), kTpD, tp, 302, halves, true);
      expect_unit_tp_matches(untied, gpt_sp_batch(), kTpD, tp, 303, halves, true);
      expect_unit_tp_matches(tied, gpt_sp_batch(), kTpD, tp, 304, halves, true);
    }
  }
}

TEST(GptSequenceParallel, WholeModelDirectAndThroughThePluginTable) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied head" : "untied head");
    const auto units = build_gpt_units(gpt_sp_config(tied));
    for (const int tp : {2, 3, 4}) {
      expect_model_tp_matches(units, gpt_sp_batch(), tp, 305, nullptr, true);
    }
    const auto model = tessera::test::build_model(
        "gpt", std::string("vocab = 12\nlayers = 2\nd_model = 24\nheads = 12\nseq_len = 12\n"
                           "mlp_ratio = 2\ntied_head = ") +
                   (tied ? "true" : "false"));
    for (const int tp : {2, 4}) {
      expect_model_tp_matches(units, gpt_sp_batch(), tp, 306, model.get(), true);
    }
  }
}

// Bytes a block's context holds after its forward on rank 0 of a group of
// `tp` with `flags`.
std::size_t block_bytes_after_forward(int tp, uint32_t flags) {
  const GptBlock unit("block0", kTpD, kTpHeads, 2, kSpSeq);
  const Batch batch = gpt_sp_batch();
  const BatchView view = tessera::test::view_of(batch);
  const int64_t rows = batch.size * batch.seq_len / ((flags & TESSERA_TP_SEQUENCE) != 0 ? tp : 1);
  const testing::ConstantParams params = testing::constant_params(unit, tp, 0.5f);
  const std::vector<float> x(static_cast<std::size_t>(rows * kTpD), 0.25f);
  std::size_t bytes = 0;
  testing::run_tp_ranks(
      tp,
      [&](int rank, const tessera_tp_group& group) {
        auto ctx = unit.make_context();
        (void)testing::forward_in_group(unit, *ctx, params.ptrs, view, group, x, rows);
        if (rank == 0) bytes = ctx->bytes();
      },
      flags);
  return bytes;
}

// A block keeps its input, residual sum and output [N, d] and both
// LayerNorms' mean and rstd [N] for this rank's N/tp rows under sequence
// parallelism instead of all N: after forward it holds
//   (N − N/tp) · (3·d + 4) · 4 bytes
// less than in tensor mode; everything else (the gathered LayerNorm
// outputs, q|k|v, attention, the MLP's hidden activations) is the same.
TEST(GptSequenceParallel, BlockSavesTheSplitRegionsOnItsRowsOnly) {
  const int64_t n = 2 * kSpSeq;
  for (const int tp : {2, 3, 4}) {
    SCOPED_TRACE("tp = " + std::to_string(tp));
    const std::size_t tensor = block_bytes_after_forward(tp, 0);
    const std::size_t sequence = block_bytes_after_forward(tp, TESSERA_TP_SEQUENCE);
    const auto split_region = static_cast<std::size_t>((n - n / tp) * (3 * kTpD + 4) * 4);
    EXPECT_EQ(tensor - sequence, split_region);
  }
}

// A backward must split the rows as its forward did: forward with sequence
// parallelism, backward in a group of the same size without it.
TEST(GptSequenceParallel, BackwardInTheOtherModeIsRefused) {
  const GptBlock unit("block0", kTpD, kTpHeads, 2, kSpSeq);
  const Batch batch = gpt_sp_batch();
  const BatchView view = tessera::test::view_of(batch);
  const int64_t rows = batch.size * batch.seq_len / 2;
  testing::ConstantParams params = testing::constant_params(unit, 2, 0.5f);
  const std::vector<const float*>& p = params.ptrs;
  std::vector<float*> g;
  for (auto& v : params.values) g.push_back(v.data());  // never written: the backward refuses
  const std::vector<float> x(static_cast<std::size_t>(rows * kTpD), 0.25f);
  std::vector<std::string> messages(2);
  testing::run_tp_ranks(
      2,
      [&](int rank, const tessera_tp_group& group) {
        auto ctx = unit.make_context();
        const ConstView out = testing::forward_in_group(unit, *ctx, p, view, group, x, rows);
        const std::vector<float> dy(out.data, out.data + out.rows * out.cols);
        tessera_tp_group plain = group;
        plain.flags = 0;
        ctx->set_tp(&plain);
        try {
          (void)unit.backward(*ctx, p, g, {dy.data(), out.rows, out.cols});
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
          messages[static_cast<std::size_t>(rank)] = e.what();
        }
      },
      TESSERA_TP_SEQUENCE);
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("unit 'block0': backward without sequence parallelism after a forward with "
                     "it"),
              std::string::npos)
        << m;
  }
}

TEST(GptSequenceParallel, PositionsTheGroupDoesNotDivideAreRefused) {
  // 5 positions per example do not split 2 ways.
  const GptBlock block("block0", kTpD, kTpHeads, 2, kTpSeq);
  EXPECT_NE(tp_forward_error(block, gpt_tp_batch(), kTpD, 2, TESSERA_ERR_INVALID_ARGUMENT,
                             TESSERA_TP_SEQUENCE)
                .find("unit 'block0': the batch's seq_len (5) is not divisible by the "
                      "tensor-parallel group size 2, which sequence parallelism splits it by"),
            std::string::npos);
  const GptEmbedding embed("embed", kTpVocab, kTpD, kTpSeq);
  EXPECT_NE(tp_forward_error(embed, gpt_tp_batch(), 0, 2, TESSERA_ERR_INVALID_ARGUMENT,
                             TESSERA_TP_SEQUENCE)
                .find("unit 'embed': the batch's seq_len (5) is not divisible"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::model

// The gpt's split backward (TESSERA_UNIT_SPLIT_BACKWARD): for the embedding,
// a block and the head (untied and tied to the embedding), and a whole
// two-block model, backward_input then backward_weight on interleaved
// micro-batches give backward's gradients; the weight half is refused
// without its input half.
#include <gtest/gtest.h>

#include "gpt.hpp"
#include "split_check.hpp"

namespace tessera::model {
namespace {

using testing::expect_model_split_matches_backward;
using testing::expect_split_matches_backward;
using testing::expect_weight_half_refused;

constexpr int64_t kGptVocab = 9;
constexpr int64_t kGptD = 8;
constexpr int64_t kGptSeqLen = 5;

Batch gpt_split_batch(int64_t size, int64_t seq, int offset) {
  Batch batch = Batch::make(size, seq, 0);
  for (std::size_t i = 0; i < batch.tokens.size(); ++i) {
    batch.tokens[i] = static_cast<int32_t>((i * 5 + 1 + offset) % kGptVocab);
    batch.targets[i] = static_cast<int32_t>((i * 3 + 2 + offset) % kGptVocab);
  }
  return batch;
}

// Micro-batch a: 2 sequences of 5 tokens; b: 3 shorter ones of 3.
const Batch& gpt_a() {
  static const Batch batch = gpt_split_batch(2, 5, 0);
  return batch;
}
const Batch& gpt_b() {
  static const Batch batch = gpt_split_batch(3, 3, 4);
  return batch;
}

TEST(GptSplitBackward, Embedding) {
  const GptEmbedding unit("embed", kGptVocab, kGptD, kGptSeqLen);
  // Keeps the output gradient for the scatter.
  expect_split_matches_backward(unit, gpt_a(), gpt_b(), 0, kGptD, 101);
  expect_weight_half_refused(unit, gpt_a(), 0, 102);
}

TEST(GptSplitBackward, Block) {
  const GptBlock unit("block0", kGptD, 2, 3, kGptSeqLen);
  // Keeps the output gradients of proj (d), fc (3d), the attention
  // projection (d) and qkv (3d).
  expect_split_matches_backward(unit, gpt_a(), gpt_b(), kGptD, 8 * kGptD, 103);
  expect_weight_half_refused(unit, gpt_a(), kGptD, 104);
}

TEST(GptSplitBackward, UntiedHead) {
  const GptHead unit("head", kGptVocab, kGptD, "", kGptSeqLen);
  // Keeps the logits' gradient.
  expect_split_matches_backward(unit, gpt_a(), gpt_b(), kGptD, kGptVocab, 105);
  expect_weight_half_refused(unit, gpt_a(), kGptD, 106);
}

TEST(GptSplitBackward, TiedHead) {
  const GptHead unit("head", kGptVocab, kGptD, "embed.wte", kGptSeqLen);
  ASSERT_EQ(unit.params().back().tied_to, "embed.wte");
  expect_split_matches_backward(unit, gpt_a(), gpt_b(), kGptD, kGptVocab, 107);
  expect_weight_half_refused(unit, gpt_a(), kGptD, 108);
}

TEST(GptSplitBackward, WholeModelTiedAndUntied) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied head" : "untied head");
    GptConfig config;
    config.vocab = kGptVocab;
    config.layers = 2;
    config.d_model = kGptD;
    config.heads = 2;
    config.seq_len = kGptSeqLen;
    config.tied_head = tied;
    config.mlp_ratio = 2;
    const auto units = build_gpt_units(config);
    // With the tie, embed.wte collects the gradients of both ends.
    ASSERT_EQ(units.back()->params().back().tied_to, tied ? "embed.wte" : "");
    expect_model_split_matches_backward(units, gpt_a(), gpt_b(), 109);
  }
}

}  // namespace
}  // namespace tessera::model

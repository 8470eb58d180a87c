// The llama's split backward (TESSERA_UNIT_SPLIT_BACKWARD): for the
// embedding, blocks with grouped-query and multi-query attention, the head,
// and a whole two-block model, backward_input then backward_weight on
// interleaved micro-batches give backward's gradients; the weight half is
// refused without its input half.
#include <gtest/gtest.h>

#include "llama.hpp"
#include "split_check.hpp"

namespace tessera::model {
namespace {

using testing::expect_model_split_matches_backward;
using testing::expect_split_matches_backward;
using testing::expect_weight_half_refused;

constexpr int64_t kLlamaSplitVocab = 9;
constexpr int64_t kLlamaSplitD = 16;
constexpr int64_t kLlamaSplitFfn = 12;
constexpr int64_t kLlamaSplitHeadDim = 4;  // d_model 16 over 4 query heads

// Four query heads over `kv_heads` key/value heads (head dimension 4).
LlamaConfig llama_split_config(int64_t kv_heads) {
  LlamaConfig c;
  c.vocab = kLlamaSplitVocab;
  c.layers = 2;
  c.d_model = kLlamaSplitD;
  c.heads = 4;
  c.kv_heads = kv_heads;
  c.ffn = kLlamaSplitFfn;
  c.seq_len = 5;
  return c;
}

Batch llama_split_batch(int64_t size, int64_t seq, int offset) {
  Batch batch = Batch::make(size, seq, 0);
  for (std::size_t i = 0; i < batch.tokens.size(); ++i) {
    batch.tokens[i] = static_cast<int32_t>((i * 5 + 1 + offset) % kLlamaSplitVocab);
    batch.targets[i] = static_cast<int32_t>((i * 3 + 2 + offset) % kLlamaSplitVocab);
  }
  return batch;
}

// Micro-batch a: 2 sequences of 5 tokens; b: 3 shorter ones of 3.
const Batch& llama_a() {
  static const Batch batch = llama_split_batch(2, 5, 0);
  return batch;
}
const Batch& llama_b() {
  static const Batch batch = llama_split_batch(3, 3, 4);
  return batch;
}

TEST(LlamaSplitBackward, Embedding) {
  const LlamaEmbedding unit("embed", llama_split_config(2));
  // Keeps the output gradient for the scatter.
  expect_split_matches_backward(unit, llama_a(), llama_b(), 0, kLlamaSplitD, 201);
  expect_weight_half_refused(unit, llama_a(), 0, 202);
}

TEST(LlamaSplitBackward, BlockGroupedQuery) {
  const LlamaBlock unit("block0", llama_split_config(2));
  // Keeps the output gradients of w_down (d), w_gate and w_up (ffn each),
  // wo and wq (d each), wk and wv (kv = 2 heads · head dimension each).
  constexpr int64_t kKept = 3 * kLlamaSplitD + 2 * kLlamaSplitFfn + 2 * (2 * kLlamaSplitHeadDim);
  expect_split_matches_backward(unit, llama_a(), llama_b(), kLlamaSplitD, kKept, 203);
  expect_weight_half_refused(unit, llama_a(), kLlamaSplitD, 204);
}

TEST(LlamaSplitBackward, BlockMultiQuery) {
  const LlamaBlock unit("block1", llama_split_config(1));
  constexpr int64_t kKept = 3 * kLlamaSplitD + 2 * kLlamaSplitFfn + 2 * kLlamaSplitHeadDim;
  expect_split_matches_backward(unit, llama_a(), llama_b(), kLlamaSplitD, kKept, 205);
}

TEST(LlamaSplitBackward, Head) {
  const LlamaHead unit("head", llama_split_config(2));
  // Keeps the logits' gradient.
  expect_split_matches_backward(unit, llama_a(), llama_b(), kLlamaSplitD, kLlamaSplitVocab, 206);
  expect_weight_half_refused(unit, llama_a(), kLlamaSplitD, 207);
}

TEST(LlamaSplitBackward, WholeModelGroupedQuery) {
  const auto units = build_llama_units(llama_split_config(2));
  expect_model_split_matches_backward(units, llama_a(), llama_b(), 208);
}

}  // namespace
}  // namespace tessera::model

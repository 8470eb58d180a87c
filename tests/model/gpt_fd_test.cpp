// Finite-difference checks of the gpt's units.
#include <gtest/gtest.h>

#include "fd_check.hpp"
#include "gpt.hpp"

namespace tessera::model {
namespace {

using testing::expect_gradients_match;
using testing::random_values;

Batch sequence_batch(int64_t size, int64_t seq, int64_t vocab) {
  Batch batch = Batch::make(size, seq, 0);
  for (std::size_t i = 0; i < batch.tokens.size(); ++i) {
    batch.tokens[i] = static_cast<int32_t>((i * 5 + 1) % static_cast<std::size_t>(vocab));
    batch.targets[i] = static_cast<int32_t>((i * 3 + 2) % static_cast<std::size_t>(vocab));
  }
  return batch;
}

TEST(GptGradients, Embedding) {
  const GptEmbedding unit("embed", 7, 4, 5);
  const Batch batch = sequence_batch(2, 5, 7);
  expect_gradients_match(unit, batch, {}, 0, 0.5f, 1e-2f, 31);
}

TEST(GptGradients, EmbeddingShorterSequence) {
  const GptEmbedding unit("embed", 7, 4, 5);
  const Batch batch = sequence_batch(3, 3, 7);
  expect_gradients_match(unit, batch, {}, 0, 0.5f, 1e-2f, 32);
}

TEST(GptGradients, DecoderBlock) {
  const GptBlock unit("block0", 8, 2, 2);
  const Batch batch = sequence_batch(2, 4, 7);
  expect_gradients_match(unit, batch, random_values(2 * 4 * 8, 1.0f, 33), 8, 0.4f, 1e-2f, 34);
}

TEST(GptGradients, DecoderBlockOneHeadLongerSequence) {
  const GptBlock unit("block1", 6, 1, 3);
  const Batch batch = sequence_batch(1, 6, 7);
  expect_gradients_match(unit, batch, random_values(6 * 6, 1.0f, 35), 6, 0.4f, 1e-2f, 36);
}

TEST(GptGradients, UntiedHead) {
  const GptHead unit("head", 9, 6, "");
  const Batch batch = sequence_batch(2, 3, 9);
  expect_gradients_match(unit, batch, random_values(2 * 3 * 6, 1.0f, 37), 6, 0.5f, 1e-2f, 38);
}

TEST(GptGradients, TiedHeadAlone) {
  const GptHead unit("head", 9, 6, "embed.wte");
  ASSERT_EQ(unit.params().back().tied_to, "embed.wte");
  const Batch batch = sequence_batch(2, 3, 9);
  expect_gradients_match(unit, batch, random_values(2 * 3 * 6, 1.0f, 39), 6, 0.5f, 1e-2f, 40);
}

}  // namespace
}  // namespace tessera::model

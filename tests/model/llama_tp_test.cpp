// The llama under tensor parallelism: the embedding and head split by
// vocabulary, blocks split by query heads and SwiGLU columns with key/value
// heads split where the group divides them and replicated (kv_replicated)
// where it does not, and whole small models, on 2, 3 and 4 in-memory ranks
// against the whole units on one rank; a group of one rank changes
// nothing; sizes that do not divide are refused naming the key and the
// group size.
#include <gtest/gtest.h>

#include <string>

#include "../support/models.hpp"
#include "llama.hpp"
#include "tessera/sdk/error.hpp"
#include "tp_check.hpp"

namespace tessera::model {
namespace {

using testing::expect_model_tp_matches;
using testing::expect_tp_one_is_identical;
using testing::expect_unit_tp_matches;
using testing::tp_forward_error;

// Divisible by 2, 3 and 4: vocab 12, 12 query heads of 2 (d = 24), ffn 24.
LlamaConfig llama_tp_config(int64_t kv_heads, bool kv_replicated) {
  LlamaConfig config;
  config.vocab = 12;
  config.layers = 2;
  config.d_model = 24;
  config.heads = 12;
  config.kv_heads = kv_heads;
  config.seq_len = 5;
  config.ffn = 24;
  config.kv_replicated = kv_replicated;
  return config;
}

Batch llama_tp_batch() {
  Batch batch = Batch::make(2, 5, 0);
  for (std::size_t i = 0; i < batch.tokens.size(); ++i) {
    batch.tokens[i] = static_cast<int32_t>((i * 5 + 3) % 12);
    batch.targets[i] = static_cast<int32_t>((i * 7 + 1) % 12);
  }
  return batch;
}

TEST(LlamaTensorParallel, EmbeddingAndHead) {
  const LlamaConfig config = llama_tp_config(12, false);
  const LlamaEmbedding embed("embed", config);
  const LlamaHead head("head", config);
  for (const int tp : {2, 3, 4}) {
    expect_unit_tp_matches(embed, llama_tp_batch(), 0, tp, 301);
    expect_unit_tp_matches(embed, llama_tp_batch(), 0, tp, 302, true);
    expect_unit_tp_matches(head, llama_tp_batch(), 24, tp, 303);
    expect_unit_tp_matches(head, llama_tp_batch(), 24, tp, 304, true);
  }
}

TEST(LlamaTensorParallel, BlockWithKeyValueHeadsSplit) {
  // Multi-head (12 kv heads) at 2, 3, 4; grouped (4 kv heads) at 2 and 4.
  const LlamaBlock mha("block0", llama_tp_config(12, false));
  const LlamaBlock gqa("block0", llama_tp_config(4, false));
  EXPECT_EQ(gqa.params()[2].split, SplitHint::column);
  for (const int tp : {2, 3, 4}) {
    expect_unit_tp_matches(mha, llama_tp_batch(), 24, tp, 305);
    expect_unit_tp_matches(mha, llama_tp_batch(), 24, tp, 306, true);
  }
  for (const int tp : {2, 4}) {
    expect_unit_tp_matches(gqa, llama_tp_batch(), 24, tp, 307);
    expect_unit_tp_matches(gqa, llama_tp_batch(), 24, tp, 308, true);
  }
}

TEST(LlamaTensorParallel, BlockWithKeyValueHeadsReplicated) {
  // 4 kv heads at 3 ranks, 2 at 4, one (multi-query) at 2: wk and wv are
  // whole on every rank and their gradients (checked on each rank) are
  // the sums over the group's query heads.
  const struct {
    int64_t kv;
    int tp;
  } cases[] = {{4, 3}, {2, 4}, {1, 2}, {4, 2}};
  for (const auto& c : cases) {
    SCOPED_TRACE("kv_heads " + std::to_string(c.kv));
    const LlamaBlock unit("block0", llama_tp_config(c.kv, true));
    ASSERT_EQ(unit.params()[2].name, "wk");
    EXPECT_EQ(unit.params()[2].split, SplitHint::none);
    EXPECT_EQ(unit.params()[3].split, SplitHint::none);
    expect_unit_tp_matches(unit, llama_tp_batch(), 24, c.tp, 309);
    expect_unit_tp_matches(unit, llama_tp_batch(), 24, c.tp, 310, true);
  }
}

TEST(LlamaTensorParallel, WholeModels) {
  for (const int tp : {2, 3, 4}) {
    SCOPED_TRACE("multi-head");
    expect_model_tp_matches(build_llama_units(llama_tp_config(12, false)), llama_tp_batch(), tp,
                            311);
  }
  for (const int tp : {2, 4}) {
    SCOPED_TRACE("4 kv heads split");
    expect_model_tp_matches(build_llama_units(llama_tp_config(4, false)), llama_tp_batch(), tp,
                            312);
  }
  SCOPED_TRACE("4 kv heads replicated at 3 ranks");
  expect_model_tp_matches(build_llama_units(llama_tp_config(4, true)), llama_tp_batch(), 3, 313);
}

TEST(LlamaTensorParallel, ThroughThePluginTable) {
  const auto model = tessera::test::build_model(
      "llama",
      "vocab = 12\nlayers = 2\nd_model = 24\nheads = 12\nkv_heads = 4\nseq_len = 5\nffn = 24\n"
      "kv_replicated = true\n");
  expect_model_tp_matches(build_llama_units(llama_tp_config(4, true)), llama_tp_batch(), 3, 314,
                          model.get());
}

TEST(LlamaTensorParallel, GroupOfOneIsBitIdentical) {
  const LlamaConfig config = llama_tp_config(4, false);
  expect_tp_one_is_identical(LlamaEmbedding("embed", config), llama_tp_batch(), 0, 315);
  expect_tp_one_is_identical(LlamaBlock("block0", config), llama_tp_batch(), 24, 316);
  expect_tp_one_is_identical(LlamaHead("head", config), llama_tp_batch(), 24, 317);
}

TEST(LlamaTensorParallel, SizesThatDoNotDivideAreRefused) {
  const auto error = [](const Unit& unit, int64_t cols, int tp) {
    return tp_forward_error(unit, llama_tp_batch(), cols, tp, TESSERA_ERR_INVALID_ARGUMENT);
  };
  const LlamaBlock gqa("block0", llama_tp_config(4, false));
  EXPECT_NE(error(gqa, 24, 3)
                .find("unit 'block0': key 'kv_heads' (4) is not divisible by the "
                      "tensor-parallel group size 3; key 'kv_replicated' = true "
                      "keeps the key/value heads whole on every rank"),
            std::string::npos);
  EXPECT_NE(error(gqa, 24, 5)
                .find("unit 'block0': key 'heads' (12) is not divisible by the "
                      "tensor-parallel group size 5"),
            std::string::npos);
  LlamaConfig odd_ffn = llama_tp_config(12, false);
  odd_ffn.ffn = 26;
  EXPECT_NE(error(LlamaBlock("block0", odd_ffn), 24, 4)
                .find("unit 'block0': key 'ffn' (26) is not divisible by the tensor-parallel "
                      "group size 4"),
            std::string::npos);
  const LlamaConfig config = llama_tp_config(12, false);
  EXPECT_NE(error(LlamaEmbedding("embed", config), 0, 5)
                .find("unit 'embed': key 'vocab' (12) is not divisible by the tensor-parallel "
                      "group size 5"),
            std::string::npos);
  EXPECT_NE(error(LlamaHead("head", config), 24, 5)
                .find("unit 'head': key 'vocab' (12) is not divisible by the tensor-parallel "
                      "group size 5"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::model

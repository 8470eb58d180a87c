// The llama under tensor parallelism: the embedding and head split by
// vocabulary, blocks split by query heads and SwiGLU columns with key/value
// heads split where the group divides them and replicated (kv_replicated)
// where it does not, and whole small models, on 2, 3 and 4 in-memory ranks
// against the whole units on one rank; a group of one rank changes
// nothing; sizes that do not divide are refused naming the key and the
// group size. Sequence parallelism (TESSERA_TP_SEQUENCE): the same units
// and models on each rank's slice of the positions, their context bytes
// after a forward against the formula, and a sequence length the group does
// not divide refused naming the key.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "../support/models.hpp"
#include "fd_check.hpp"
#include "llama.hpp"
#include "tessera/sdk/error.hpp"
#include "tp_check.hpp"

namespace tessera::model {
namespace {

using testing::expect_model_tp_matches;
using testing::expect_tp_one_is_identical;
using testing::expect_unit_tp_matches;
using testing::random_values;
using testing::row_slice;
using testing::run_tp_ranks;
using testing::shard_of;
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

// Sequence parallelism needs a seq_len the group divides: 12 positions
// (2, 3 and 4 ranks), otherwise as llama_tp_config.
LlamaConfig llama_seq_config(int64_t kv_heads, bool kv_replicated) {
  LlamaConfig config = llama_tp_config(kv_heads, kv_replicated);
  config.seq_len = 12;
  return config;
}

Batch llama_seq_batch() {
  Batch batch = Batch::make(2, 12, 0);
  for (std::size_t i = 0; i < batch.tokens.size(); ++i) {
    batch.tokens[i] = static_cast<int32_t>((i * 5 + 3) % 12);
    batch.targets[i] = static_cast<int32_t>((i * 7 + 1) % 12);
  }
  return batch;
}

constexpr bool kSequence = true;

TEST(LlamaSequenceParallel, EmbeddingAndHead) {
  const LlamaConfig config = llama_seq_config(12, false);
  const LlamaEmbedding embed("embed", config);
  const LlamaHead head("head", config);
  for (const int tp : {2, 3, 4}) {
    expect_unit_tp_matches(embed, llama_seq_batch(), 0, tp, 401, false, kSequence);
    expect_unit_tp_matches(embed, llama_seq_batch(), 0, tp, 402, true, kSequence);
    expect_unit_tp_matches(head, llama_seq_batch(), 24, tp, 403, false, kSequence);
    expect_unit_tp_matches(head, llama_seq_batch(), 24, tp, 404, true, kSequence);
  }
}

TEST(LlamaSequenceParallel, BlockWithKeyValueHeadsSplit) {
  // Multi-head (12 kv heads) at 2, 3, 4; grouped (4 kv heads) at 2 and 4.
  const LlamaBlock mha("block0", llama_seq_config(12, false));
  const LlamaBlock gqa("block0", llama_seq_config(4, false));
  for (const int tp : {2, 3, 4}) {
    expect_unit_tp_matches(mha, llama_seq_batch(), 24, tp, 405, false, kSequence);
    expect_unit_tp_matches(mha, llama_seq_batch(), 24, tp, 406, true, kSequence);
  }
  for (const int tp : {2, 4}) {
    expect_unit_tp_matches(gqa, llama_seq_batch(), 24, tp, 407, false, kSequence);
    expect_unit_tp_matches(gqa, llama_seq_batch(), 24, tp, 408, true, kSequence);
  }
}

TEST(LlamaSequenceParallel, BlockWithKeyValueHeadsReplicated) {
  // wk and wv whole on every rank: each rank's gradient is h1ᵀ times its
  // query heads' share of dk and dv (no sum inside the unit); summed over
  // the group (the harness, as the tensor strategy) it is the whole one,
  // and the input gradient scatters the same shares' sum.
  const struct {
    int64_t kv;
    int tp;
  } cases[] = {{4, 3}, {2, 4}, {1, 2}, {4, 2}};
  for (const auto& c : cases) {
    SCOPED_TRACE("kv_heads " + std::to_string(c.kv));
    const LlamaBlock unit("block0", llama_seq_config(c.kv, true));
    expect_unit_tp_matches(unit, llama_seq_batch(), 24, c.tp, 409, false, kSequence);
    expect_unit_tp_matches(unit, llama_seq_batch(), 24, c.tp, 410, true, kSequence);
  }
}

TEST(LlamaSequenceParallel, WholeModels) {
  for (const int tp : {2, 3, 4}) {
    SCOPED_TRACE("multi-head");
    expect_model_tp_matches(build_llama_units(llama_seq_config(12, false)), llama_seq_batch(), tp,
                            411, nullptr, kSequence);
  }
  for (const int tp : {2, 4}) {
    SCOPED_TRACE("4 kv heads split");
    expect_model_tp_matches(build_llama_units(llama_seq_config(4, false)), llama_seq_batch(), tp,
                            412, nullptr, kSequence);
  }
  SCOPED_TRACE("4 kv heads replicated at 3 ranks");
  expect_model_tp_matches(build_llama_units(llama_seq_config(4, true)), llama_seq_batch(), 3, 413,
                          nullptr, kSequence);
}

TEST(LlamaSequenceParallel, ThroughThePluginTable) {
  const std::string shape =
      "vocab = 12\nlayers = 2\nd_model = 24\nheads = 12\nkv_heads = 4\nseq_len = 12\n"
      "ffn = 24\n";
  const auto replicated = tessera::test::build_model("llama", shape + "kv_replicated = true\n");
  expect_model_tp_matches(build_llama_units(llama_seq_config(4, true)), llama_seq_batch(), 3, 414,
                          replicated.get(), kSequence);
  const auto split = tessera::test::build_model("llama", shape);
  expect_model_tp_matches(build_llama_units(llama_seq_config(4, false)), llama_seq_batch(), 2, 415,
                          split.get(), kSequence);
}

// Each rank's context bytes after a forward of `unit` (input `cols` wide,
// 0 for the first unit) in a group of `tp` with `flags`.
std::vector<std::size_t> llama_forward_bytes(const Unit& unit, const Batch& batch, int64_t cols,
                                             int tp, uint32_t flags) {
  const BatchView view = tessera::test::view_of(batch);
  const int64_t n = batch.size * batch.seq_len;
  const auto specs = unit.params();
  std::vector<std::vector<float>> whole;
  uint64_t seed = 420;
  for (const ParamSpec& spec : specs) whole.push_back(random_values(spec.numel(), 0.4f, seed++));
  const std::vector<float> x = random_values(n * cols, 1.0f, seed);
  std::vector<std::size_t> bytes(static_cast<std::size_t>(tp));
  run_tp_ranks(
      tp,
      [&](int rank, const tessera_tp_group& group) {
        std::vector<std::vector<float>> shards;
        std::vector<const float*> p;
        for (std::size_t i = 0; i < specs.size(); ++i) {
          shards.push_back(shard_of(specs[i], whole[i], rank, tp));
        }
        for (const auto& s : shards) p.push_back(s.data());
        const std::vector<float> mine =
            (flags & TESSERA_TP_SEQUENCE) != 0 ? row_slice(batch, x, cols, rank, tp) : x;
        auto ctx = unit.make_context();
        ctx->set_tp(&group);
        UnitInput in;
        in.batch = &view;
        in.tp = &group;
        if (!unit.is_first()) in.x = {mine.data(), static_cast<int64_t>(mine.size()) / cols, cols};
        (void)unit.forward(*ctx, p, in);
        bytes[static_cast<std::size_t>(rank)] = ctx->bytes();
      },
      flags);
  return bytes;
}

TEST(LlamaSequenceParallel, ContextBytesAfterForward) {
  // n = B·T tokens, p ranks, nl = n/p this rank's rows; floats of 4 bytes.
  // A block keeps, with sequence parallelism, its input x, the residual sum
  // x2, the output y (nl·d each) and both RMSNorms' rstd (nl each) for its
  // rows only; h1 and h2 (n·d each, what the column products read), q and
  // the attention output (n·d/p each), k and v (n·kv·hd/p each, n·kv·hd
  // with kv_replicated), gate, up and their product (n·ffn/p each) and the
  // probabilities (B·(heads/p)·T²) stay as in tensor mode:
  //   block_seq = 4·(3·nl·d + 2·nl + 2·n·d + 2·n·d/p + 2·n·kvd + 3·n·ffn/p
  //                  + B·(heads/p)·T²)
  //   block_tensor − block_seq = 4·(1 − 1/p)·(3·n·d + 2·n)
  // The embedding keeps the tokens (n int32) and its output's rows:
  //   embed_seq = 4·(n + nl·d),  embed_tensor − embed_seq = 4·(1 − 1/p)·n·d
  // The head keeps the targets (n int32), its input and rstd for its rows,
  // the gathered norm output and the probabilities of its vocabulary slice:
  //   head_seq = 4·(n + nl·d + nl + n·d + n·vocab/p),
  //   head_tensor − head_seq = 4·(1 − 1/p)·(n·d + n)
  const Batch batch = llama_seq_batch();
  const int64_t bsz = batch.size;
  const int64_t t = batch.seq_len;
  const int64_t n = bsz * t;
  const int64_t d = 24;
  const int64_t heads = 12;
  const int64_t hd = 2;
  const int64_t ffn = 24;
  const int64_t vocab = 12;
  const struct {
    int64_t kv;
    bool replicated;
    int tp;
  } cases[] = {{12, false, 2}, {4, false, 4}, {4, true, 3}};
  for (const auto& c : cases) {
    SCOPED_TRACE("kv_heads " + std::to_string(c.kv) + (c.replicated ? " replicated" : "") +
                 ", tp = " + std::to_string(c.tp));
    const LlamaConfig config = llama_seq_config(c.kv, c.replicated);
    const int64_t p = c.tp;
    const int64_t nl = n / p;
    const int64_t kvd = c.replicated ? c.kv * hd : c.kv * hd / p;
    const auto block_seq =
        static_cast<std::size_t>(4 * (3 * nl * d + 2 * nl + 2 * n * d + 2 * n * d / p +
                                      2 * n * kvd + 3 * n * ffn / p + bsz * (heads / p) * t * t));
    const auto block_saved = static_cast<std::size_t>(4 * (p - 1) * (3 * n * d + 2 * n) / p);
    const auto embed_seq = static_cast<std::size_t>(4 * (n + nl * d));
    const auto embed_saved = static_cast<std::size_t>(4 * (p - 1) * n * d / p);
    const auto head_seq = static_cast<std::size_t>(4 * (n + nl * d + nl + n * d + n * vocab / p));
    const auto head_saved = static_cast<std::size_t>(4 * (p - 1) * (n * d + n) / p);
    const LlamaBlock block("block0", config);
    const LlamaEmbedding embed("embed", config);
    const LlamaHead head("head", config);
    const struct {
      const Unit* unit;
      int64_t cols;
      std::size_t seq;
      std::size_t saved;
    } units[] = {{&block, d, block_seq, block_saved},
                 {&embed, 0, embed_seq, embed_saved},
                 {&head, d, head_seq, head_saved}};
    for (const auto& u : units) {
      const auto seq = llama_forward_bytes(*u.unit, batch, u.cols, c.tp, TESSERA_TP_SEQUENCE);
      const auto tensor = llama_forward_bytes(*u.unit, batch, u.cols, c.tp, 0);
      for (int rank = 0; rank < c.tp; ++rank) {
        const auto r = static_cast<std::size_t>(rank);
        EXPECT_EQ(seq[r], u.seq) << u.unit->name() << ", rank " << rank;
        EXPECT_EQ(tensor[r] - seq[r], u.saved) << u.unit->name() << ", rank " << rank;
      }
    }
  }
}

TEST(LlamaSequenceParallel, SequenceLengthTheGroupDoesNotDivideIsRefused) {
  // llama_tp_batch has 5 positions: every unit refuses 2 ranks naming the
  // key, on every rank, before it reads its input.
  const LlamaConfig config = llama_tp_config(4, false);
  const Batch batch = llama_tp_batch();
  const BatchView view = tessera::test::view_of(batch);
  const LlamaEmbedding embed("embed", config);
  const LlamaBlock block("block0", config);
  const LlamaHead head("head", config);
  for (const Unit* unit : {static_cast<const Unit*>(&embed), static_cast<const Unit*>(&block),
                           static_cast<const Unit*>(&head)}) {
    SCOPED_TRACE(unit->name());
    const auto specs = unit->params();
    std::vector<std::vector<float>> whole;
    for (const ParamSpec& spec : specs) whole.push_back(random_values(spec.numel(), 0.4f, 430));
    const std::vector<float> x = random_values(10 * 24, 1.0f, 431);
    std::mutex mu;
    std::vector<std::string> messages;
    run_tp_ranks(
        2,
        [&](int rank, const tessera_tp_group& group) {
          std::vector<std::vector<float>> shards;
          std::vector<const float*> p;
          for (std::size_t i = 0; i < specs.size(); ++i) {
            shards.push_back(shard_of(specs[i], whole[i], rank, 2));
          }
          for (const auto& s : shards) p.push_back(s.data());
          auto ctx = unit->make_context();
          ctx->set_tp(&group);
          UnitInput in;
          in.batch = &view;
          in.tp = &group;
          if (!unit->is_first()) in.x = {x.data() + rank * 5 * 24, 5, 24};
          try {
            (void)unit->forward(*ctx, p, in);
            ADD_FAILURE() << "rank " << rank << ": seq_len 5 accepted by a group of 2";
          } catch (const Error& e) {
            EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
            const std::lock_guard<std::mutex> lock(mu);
            messages.emplace_back(e.what());
          }
        },
        TESSERA_TP_SEQUENCE);
    ASSERT_EQ(messages.size(), 2u);
    for (const std::string& m : messages) {
      EXPECT_NE(m.find("unit '" + unit->name() +
                       "': key 'seq_len' (5) is not divisible by the tensor-parallel group "
                       "size 2, which sequence parallelism splits it by"),
                std::string::npos)
          << m;
    }
  }
}

TEST(LlamaSequenceParallel, BackwardInAnotherModeIsRefused) {
  // A forward with sequence parallelism and a backward without it (or the
  // reverse) would read rows of the wrong count: refused naming the unit.
  const LlamaConfig config = llama_seq_config(12, false);
  const Batch batch = llama_seq_batch();
  const BatchView view = tessera::test::view_of(batch);
  const LlamaBlock block("block0", config);
  const auto specs = block.params();
  std::vector<std::vector<float>> whole;
  for (const ParamSpec& spec : specs) whole.push_back(random_values(spec.numel(), 0.4f, 440));
  const std::vector<float> x = random_values(24 * 24, 1.0f, 441);
  std::mutex mu;
  std::vector<std::string> messages;
  run_tp_ranks(
      2,
      [&](int rank, const tessera_tp_group& group) {
        std::vector<std::vector<float>> shards;
        std::vector<const float*> p;
        for (std::size_t i = 0; i < specs.size(); ++i) {
          shards.push_back(shard_of(specs[i], whole[i], rank, 2));
        }
        for (const auto& s : shards) p.push_back(s.data());
        const std::vector<float> mine = row_slice(batch, x, 24, rank, 2);
        auto ctx = block.make_context();
        ctx->set_tp(&group);
        UnitInput in;
        in.batch = &view;
        in.tp = &group;
        in.x = {mine.data(), 12, 24};
        const ConstView y = block.forward(*ctx, p, in);
        tessera_tp_group tensor = group;
        tensor.flags = 0;
        ctx->set_tp(&tensor);
        try {
          (void)block.backward_input(*ctx, p, y);
          ADD_FAILURE() << "rank " << rank << ": backward without sequence parallelism accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
          const std::lock_guard<std::mutex> lock(mu);
          messages.emplace_back(e.what());
        }
      },
      TESSERA_TP_SEQUENCE);
  ASSERT_EQ(messages.size(), 2u);
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("unit 'block0': backward_input without sequence parallelism after a forward "
                     "with it"),
              std::string::npos)
        << m;
  }
}

}  // namespace
}  // namespace tessera::model

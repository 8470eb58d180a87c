// The activation figures of the in-tree units (model 2.2 UnitCost) against
// what their contexts really hold: after a forward and backward of the
// whole model on one rank and on tensor-parallel groups of 2 and 4 in both
// modes, each unit's context on rank 0 holds
//   examples x (split / p + sequence / (p in sequence mode, else 1) + rest)
// bytes plus the unit's few buffers that do not grow with the batch, and
// its forward output is examples x output_bytes (divided by p where the
// unit hands on a shard or, in sequence mode, its rows).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpt.hpp"
#include "llama.hpp"
#include "mlp.hpp"
#include "tp_check.hpp"

namespace tessera::model {
namespace {

using testing::ContextBytes;
using testing::model_context_bytes;

struct Expect {
  // Elements per context that do not grow with the batch (LayerNorm /
  // RMSNorm gain gradients, the attention scores' scratch).
  std::function<int64_t(const Unit&)> fixed;
  // Whether unit u's forward output is divided among the group (a shard or
  // its rows) in the given mode.
  std::function<bool(std::size_t u, bool sequence)> output_split;
};

void expect_costs_match(const std::vector<std::unique_ptr<Unit>>& units, const Batch& batch,
                        const Expect& expect) {
  const auto examples = static_cast<double>(batch.size);
  for (const int tp : {1, 2, 4}) {
    for (const bool sequence : {false, true}) {
      if (tp == 1 && sequence) continue;
      SCOPED_TRACE("tp = " + std::to_string(tp) + (sequence ? ", sequence" : ", tensor"));
      const ContextBytes got = model_context_bytes(units, batch, tp, sequence);
      for (std::size_t u = 0; u < units.size(); ++u) {
        const Unit& unit = *units[u];
        const UnitCost c = unit.cost();
        const double seq = c.sequence_activation_bytes / (sequence ? tp : 1);
        const double rest =
            c.activation_bytes - c.split_activation_bytes - c.sequence_activation_bytes;
        const double want = examples * (c.split_activation_bytes / tp + seq + rest) +
                            4.0 * static_cast<double>(expect.fixed(unit));
        EXPECT_DOUBLE_EQ(static_cast<double>(got.context[u]), want) << unit.name();
        const double out = examples * c.output_bytes / (expect.output_split(u, sequence) ? tp : 1);
        EXPECT_DOUBLE_EQ(static_cast<double>(got.output[u]), out) << unit.name();
      }
    }
  }
}

Batch token_batch(int64_t examples, int64_t seq, int64_t vocab) {
  Batch batch = Batch::make(examples, seq, 0);
  for (std::size_t i = 0; i < batch.tokens.size(); ++i) {
    batch.tokens[i] = static_cast<int32_t>((i * 5 + 3) % static_cast<std::size_t>(vocab));
    batch.targets[i] = static_cast<int32_t>((i * 7 + 1) % static_cast<std::size_t>(vocab));
  }
  return batch;
}

// Sequence models hand on [T, d] rows: their rows in sequence mode.
bool rows_in_sequence(std::size_t /*u*/, bool sequence) { return sequence; }

TEST(UnitCost, GptContextsHoldWhatTheCostSays) {
  GptConfig config;
  config.vocab = 16;
  config.layers = 2;
  config.d_model = 24;
  config.heads = 4;
  config.seq_len = 8;
  config.mlp_ratio = 2;
  const auto units = build_gpt_units(config);
  const int64_t d = config.d_model;
  const int64_t t = config.seq_len;
  expect_costs_match(units, token_batch(3, t, config.vocab),
                     {[&](const Unit& u) -> int64_t {
                        if (u.name() == "embed") return 0;
                        if (u.name() == "head") return 2 * d;  // lnf gain and bias gradients
                        return 4 * d + t * t;  // two LayerNorms' gradients, the scores' scratch
                      },
                      rows_in_sequence});
}

TEST(UnitCost, LlamaContextsHoldWhatTheCostSays) {
  for (const bool kv_replicated : {false, true}) {
    SCOPED_TRACE(kv_replicated ? "kv_replicated" : "kv split");
    LlamaConfig config;
    config.vocab = 16;
    config.layers = 2;
    config.d_model = 24;
    config.heads = 4;
    config.kv_heads = kv_replicated ? 2 : 4;
    config.seq_len = 8;
    config.ffn = 32;
    config.kv_replicated = kv_replicated;
    const auto units = build_llama_units(config);
    const int64_t d = config.d_model;
    const int64_t t = config.seq_len;
    expect_costs_match(units, token_batch(3, t, config.vocab),
                       {[&](const Unit& u) -> int64_t {
                          if (u.name() == "embed") return 0;
                          if (u.name() == "head") return d;  // the norm's gain gradient
                          return 2 * d + t * t;  // both norms' gradients, the scores' scratch
                        },
                        rows_in_sequence});
  }
}

// Hidden layers column, row, column, row: no layer gathers its output (a
// gathering last layer holds the gathered output only with p > 1, which
// the cost does not count). The head splits by class (8 classes).
TEST(UnitCost, MlpContextsHoldWhatTheCostSays) {
  MlpConfig config;
  config.input = 5;
  config.hidden = {16, 8, 16, 8};
  config.classes = 8;
  config.activation = kernels::Activation::gelu;
  const auto units = build_mlp_units(config);
  Batch batch = Batch::make(8, 0, config.input);
  for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
    batch.inputs[i] = static_cast<float>(i % 7) / 7.0f;
  }
  for (std::size_t i = 0; i < batch.targets.size(); ++i) {
    batch.targets[i] = static_cast<int32_t>(i % 8);
  }
  expect_costs_match(units, batch,
                     {[](const Unit&) -> int64_t { return 0; },
                      // A column layer hands on its shard of the features in
                      // both modes, a row layer its rows in sequence mode.
                      [](std::size_t u, bool sequence) { return u % 2 == 0 || sequence; }});
}

}  // namespace
}  // namespace tessera::model

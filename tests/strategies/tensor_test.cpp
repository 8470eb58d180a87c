// The `tensor` strategy on mlp: tensor groups of 2, 3 and 4 ranks, alone
// and with data-parallel replicas (dp x tp = 4), with the last hidden layer
// row-split (its output whole) and column-split (its output gathered), the
// head classes-parallel and replicated, against `none` on one rank: 20
// AdamW steps with clipping, the final parameters within 1e-5 relative
// difference and replicas bit-identical; the same for gpt and llama, and
// all of it again with mode = "sequence". A rank's tracked parameters,
// gradients and optimizer state are its shards plus the replicated
// tensors; bytes sent per step and (sequence mode) the activations saved
// match their formulas; checkpoints move between tensor and zero3 at other
// world sizes. Bad options and models are refused with the option,
// parameter or unit named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "resume_support.hpp"
#include "run_support.hpp"
#include "strategy_support.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

constexpr int64_t kTensorBatch = 12;

// An mlp's widths, for the memory formula.
struct MlpWidths {
  int64_t input = 16;
  std::vector<int64_t> hidden;
  int64_t classes = 5;
};

// model_toml("mlp"): layer0 column, layer1 row (its output whole), 5
// classes (the head replicated for tp = 2, 3, 4).
MlpWidths default_widths() { return {16, {32, 24}, 5}; }
// Three hidden layers: layer2 column, its output gathered for the head; 6
// classes (classes-parallel for tp = 2 and 3, replicated for 4).
MlpWidths wide_widths() { return {16, {24, 12, 24}, 6}; }
const char* const kWideTable =
    "name = \"mlp\"\ninput = 16\nhidden = [24, 12, 24]\nclasses = 6\nactivation = \"gelu\"\n";

std::string wide_table_of(bool wide) { return wide ? kWideTable : ""; }

const train::RunResult& none_of(bool wide) {
  static std::map<bool, train::RunResult> cache;
  auto it = cache.find(wide);
  if (it == cache.end()) {
    RunSpec s;
    s.model_table = wide_table_of(wide);
    s.strategy = "none";
    s.batch = kTensorBatch;
    it = cache.emplace(wide, run(s)).first;
  }
  return it->second;
}

RunSpec tensor_spec(bool wide, int world, int tp, int64_t micro_batches = 1) {
  RunSpec s;
  s.model_table = wide_table_of(wide);
  s.strategy = "tensor";
  s.world = world;
  s.batch = kTensorBatch;
  s.micro_batches = micro_batches;
  s.strategy_options = "size = " + std::to_string(tp) + "\n";
  return s;
}

// Elements one rank holds: every layer's split tensors / tp plus the
// replicated ones (row layers' biases; the head when tp does not divide the
// classes).
int64_t held_elements(const MlpWidths& m, int tp) {
  int64_t split = 0;
  int64_t replicated = 0;
  int64_t width = m.input;
  for (size_t i = 0; i < m.hidden.size(); ++i) {
    const int64_t out = m.hidden[i];
    split += width * out;
    (i % 2 == 0 ? split : replicated) += out;
    width = out;
  }
  const int64_t head = width * m.classes + m.classes;
  (tp > 1 && m.classes % tp == 0 ? split : replicated) += head;
  return split / tp + replicated;
}

struct TensorCase {
  bool wide;
  int tp;
  int world;
  int64_t micro = 1;
  bool sequence = false;  // mode = "sequence"
};

std::string tensor_case_text(const TensorCase& c) {
  return std::string(c.wide ? "wide" : "default") + (c.sequence ? "_sequence" : "") + "_tp" +
         std::to_string(c.tp) + "_world" + std::to_string(c.world) + "_m" + std::to_string(c.micro);
}

void PrintTo(const TensorCase& c, std::ostream* os) { *os << tensor_case_text(c); }

class TensorEquivalence : public ::testing::TestWithParam<TensorCase> {};

TEST_P(TensorEquivalence, MatchesNoneOnOneRankReplicasAgreeAndHoldTheirShards) {
  const TensorCase& c = GetParam();
  RunSpec spec = tensor_spec(c.wide, c.world, c.tp, c.micro);
  if (c.sequence) spec.strategy_options += "mode = \"sequence\"\n";
  const train::RunResult result = run(spec);
  const train::RunResult& ref = none_of(c.wide);
  ASSERT_EQ(result.last_step, 20);
  ASSERT_EQ(result.final_state.size(), static_cast<size_t>(c.world));
  // Replicas bit-identical; the global norm: shards summed over the group,
  // replicated tensors once.
  expect_matches_reference(result, ref, c.tp);
  // Parameters and gradients: 4 bytes per held element; AdamW's two slots.
  const int64_t held = held_elements(c.wide ? wide_widths() : default_widths(), c.tp);
  expect_persistent_peaks(result, c.world, {4 * held, 4 * held, 8 * held});
}

std::string tensor_case_name(const ::testing::TestParamInfo<TensorCase>& info) {
  return tensor_case_text(info.param);
}

INSTANTIATE_TEST_SUITE_P(
    Mlp, TensorEquivalence,
    ::testing::Values(TensorCase{false, 2, 4}, TensorCase{false, 4, 4}, TensorCase{true, 2, 4},
                      TensorCase{true, 4, 4}, TensorCase{true, 3, 3}, TensorCase{true, 2, 2, 2},
                      TensorCase{false, 1, 2}, TensorCase{false, 2, 4, 1, true},
                      TensorCase{false, 4, 4, 1, true}, TensorCase{true, 2, 4, 1, true},
                      TensorCase{true, 4, 4, 1, true}, TensorCase{true, 3, 3, 1, true},
                      TensorCase{true, 2, 2, 2, true}),
    tensor_case_name);

// gpt (head tied to the token embedding) and llama (grouped-query
// attention: key/value heads split when tp divides kv_heads, whole with
// kv_replicated) through the strategy: heads, MLP widths and vocabularies
// split, dp x tp = 4 or tp = 3 alone.
struct TransformerCase {
  std::string name;
  std::string table;
  int tp;
  int world;
  // gpt with its head tied: d_model, seq_len, vocab, layers, for the
  // memory formula (0: not checked).
  int64_t d = 0, seq = 0, vocab = 0, layers = 0;
  bool sequence = false;  // mode = "sequence"
};

RunSpec transformer_spec(const std::string& table, int world, int tp, bool sequence) {
  RunSpec s = tensor_spec(false, world, tp);
  s.model = table.find("llama") != std::string::npos ? "llama" : "gpt";
  s.model_table = table;
  if (sequence) s.strategy_options += "mode = \"sequence\"\n";
  return s;
}

// Elements one rank of a tied gpt holds under tp: the token embedding (by
// vocabulary), q|k|v, the attention projection and both MLP matrices (with
// the column biases) split; the position embedding, the norms and the row
// projections' biases whole.
int64_t gpt_held_elements(const TransformerCase& c) {
  const int64_t d = c.d;
  const int64_t h = 4 * d;  // mlp_ratio 4
  const int64_t split = c.vocab * d + c.layers * (3 * d * d + 3 * d + d * d + d * h + h + h * d);
  const int64_t replicated = c.seq * d + c.layers * 6 * d + 2 * d;
  return split / c.tp + replicated;
}

const train::RunResult& none_of_table(const std::string& table) {
  static std::map<std::string, train::RunResult> cache;
  auto it = cache.find(table);
  if (it == cache.end()) {
    RunSpec s;
    s.model = table.find("llama") != std::string::npos ? "llama" : "gpt";
    s.model_table = table;
    s.strategy = "none";
    s.batch = kTensorBatch;
    it = cache.emplace(table, run(s)).first;
  }
  return it->second;
}

class TensorTransformers : public ::testing::TestWithParam<TransformerCase> {};

TEST_P(TensorTransformers, MatchNoneOnOneRankAndReplicasAgree) {
  const TransformerCase& c = GetParam();
  const train::RunResult result = run(transformer_spec(c.table, c.world, c.tp, c.sequence));
  const train::RunResult& ref = none_of_table(c.table);
  ASSERT_EQ(result.last_step, 20);
  expect_matches_reference(result, ref, c.tp);
  if (c.d > 0) {
    const int64_t held = gpt_held_elements(c);
    expect_persistent_peaks(result, c.world, {4 * held, 4 * held, 8 * held});
  }
}

const char* const kGpt4Heads =
    "name = \"gpt\"\nlayers = 2\nd_model = 32\nheads = 4\nseq_len = 16\nvocab = 64\n";
const char* const kGpt3Heads =
    "name = \"gpt\"\nlayers = 2\nd_model = 24\nheads = 3\nseq_len = 8\nvocab = 48\n";
const char* const kGpt3HeadsSeq12 =
    "name = \"gpt\"\nlayers = 2\nd_model = 24\nheads = 3\nseq_len = 12\nvocab = 48\n";
const char* const kLlamaGqa =
    "name = \"llama\"\nlayers = 2\nd_model = 32\nheads = 4\nkv_heads = 2\nseq_len = 8\n"
    "vocab = 32\n";
const char* const kLlamaGqaReplicated =
    "name = \"llama\"\nlayers = 2\nd_model = 32\nheads = 4\nkv_heads = 2\nkv_replicated = "
    "true\nseq_len = 8\nvocab = 32\n";
const char* const kLlamaMha =
    "name = \"llama\"\nlayers = 2\nd_model = 32\nheads = 4\nkv_heads = 4\nseq_len = 8\n"
    "vocab = 32\n";

INSTANTIATE_TEST_SUITE_P(
    Models, TensorTransformers,
    ::testing::Values(
        TransformerCase{"gpt_tp2_dp2", kGpt4Heads, 2, 4, 32, 16, 64, 2},
        TransformerCase{"gpt_tp4", kGpt4Heads, 4, 4, 32, 16, 64, 2},
        TransformerCase{"gpt_tp3", kGpt3Heads, 3, 3, 24, 8, 48, 2},
        TransformerCase{"gpt_sequence_tp2_dp2", kGpt4Heads, 2, 4, 32, 16, 64, 2, true},
        TransformerCase{"gpt_sequence_tp4", kGpt4Heads, 4, 4, 32, 16, 64, 2, true},
        TransformerCase{"gpt_sequence_tp3", kGpt3HeadsSeq12, 3, 3, 24, 12, 48, 2, true},
        TransformerCase{"llama_gqa_tp2_dp2", kLlamaGqa, 2, 4},
        TransformerCase{"llama_gqa_replicated_kv_tp4", kLlamaGqaReplicated, 4, 4},
        TransformerCase{"llama_mha_tp4", kLlamaMha, 4, 4},
        TransformerCase{"llama_gqa_sequence_tp2_dp2", kLlamaGqa, 2, 4, 0, 0, 0, 0, true},
        TransformerCase{"llama_gqa_replicated_kv_sequence_tp4", kLlamaGqaReplicated, 4, 4, 0, 0, 0,
                        0, true},
        TransformerCase{"llama_mha_sequence_tp4", kLlamaMha, 4, 4, 0, 0, 0, 0, true}),
    [](const ::testing::TestParamInfo<TransformerCase>& param_info) {
      return param_info.param.name;
    });

// Without a group (size = 1) the units run their single-rank arithmetic:
// on one rank the run is `none`'s, bit for bit, parameters and optimizer
// state.
TEST(TensorSizeOne, OneRankIsNoneBitForBit) {
  for (const bool wide : {false, true}) {
    const train::RunResult result = run(tensor_spec(wide, 1, 1));
    EXPECT_EQ(first_bit_difference(result.final_state[0], none_of(wide).final_state[0]), "")
        << (wide ? "wide" : "default") << " mlp";
  }
}

// With grad_clip = 0.1 (the norms of these runs are 0.1 to 0.4, so 1.0
// never clips) every step is clipped: the clip factor uses the global norm
// (in sequence mode after the replicated gradients are summed over the
// group). The wide mlp at tp 2 x dp 2 in both modes, gpt in sequence mode.
TEST(TensorClipping, ClippedStepsMatchNone) {
  const auto expect_clipped_match = [](RunSpec tensor, RunSpec none, const std::string& what) {
    SCOPED_TRACE(what);
    tensor.grad_clip = 0.1;
    none.strategy = "none";
    none.strategy_options.clear();
    none.world = 1;
    none.grad_clip = 0.1;
    const train::RunResult a = run(tensor);
    const train::RunResult b = run(none);
    std::string worst;
    EXPECT_LE(max_param_rel_diff(merged(a), b.final_state[0], &worst), kTolerance)
        << "largest difference in " << worst;
    ASSERT_EQ(a.logged.size(), 1U);
    ASSERT_EQ(b.logged.size(), 1U);
    EXPECT_GT(b.logged[0].grad_norm, 0.1);
    EXPECT_NEAR(a.logged[0].grad_norm, b.logged[0].grad_norm, 1e-4 * b.logged[0].grad_norm);
  };
  expect_clipped_match(tensor_spec(true, 4, 2), tensor_spec(true, 1, 1), "mlp, tensor mode");
  RunSpec sequence = tensor_spec(true, 4, 2);
  sequence.strategy_options += "mode = \"sequence\"\n";
  expect_clipped_match(sequence, tensor_spec(true, 1, 1), "mlp, sequence mode");
  expect_clipped_match(transformer_spec(kGpt4Heads, 4, 2, true),
                       transformer_spec(kGpt4Heads, 1, 1, false), "gpt, sequence mode");
}

// The memory formula itself, where the shards make the difference: the
// wide mlp holds 1170 elements on one rank, 591 per rank of tp = 2 (the
// head classes-parallel) and 414 per rank of tp = 4 (the head whole).
TEST(TensorMemory, FormulaOfTheWideMlp) {
  EXPECT_EQ(held_elements(wide_widths(), 1), 1170);
  EXPECT_EQ(held_elements(wide_widths(), 2), 591);
  EXPECT_EQ(held_elements(wide_widths(), 4), 414);
}

// The bytes rank 0 reports for step `step` of `s` at debug level: the
// tensor group's, the units' part of it and the data-parallel group's
// ({-1, -1, -1} if it wrote no such line).
struct TensorBytes {
  int64_t tensor = -1;
  int64_t units = -1;
  int64_t data_parallel = -1;
};
TensorBytes step_bytes(const RunSpec& s, int64_t step, train::RunResult* result) {
  const std::string all = debug_log_of(s, "strategy.tensor", result);
  // "tensor: step S rank 0: tensor group sent N bytes (units M), data-parallel group sent K bytes"
  const std::string prefix = "tensor: step " + std::to_string(step) + " rank 0: tensor group sent ";
  TensorBytes b;
  const size_t at = all.find(prefix);
  if (at == std::string::npos) return b;
  std::istringstream fields(all.substr(at + prefix.size()));
  std::string bytes;
  std::string units;
  std::string rest;
  fields >> b.tensor >> bytes >> units >> b.units >> rest;
  const size_t dp = all.find("data-parallel group sent ", at);
  if (!fields || units != "(units" || dp == std::string::npos) return TensorBytes{};
  std::istringstream(all.substr(dp + std::strlen("data-parallel group sent "))) >> b.data_parallel;
  return b;
}

// Bytes per step against the analytic count, wide mlp, p = 2 ranks per
// tensor group, d = 2 replicas, n = 6 rows per rank. An allreduce of b
// bytes sends 2(p-1)/p b, an allgather into b bytes (p-1)/p b.
TEST(TensorTraffic, BytesPerStepMatchTheFormula) {
  const int64_t p = 2;
  const int64_t d = 2;
  const int64_t n = kTensorBatch / d;
  const auto allreduce = [](int64_t group, int64_t b) { return 2 * (group - 1) * b / group; };
  const auto allgather = [&](int64_t b) { return (p - 1) * b / p; };
  const int64_t units = allreduce(p, 4 * n * 12)     // layer1 (row): x·w, forward
                        + allreduce(p, 4 * n * 12)   // layer2 (column): input gradient
                        + allgather(4 * n * 24)      // layer2 (column, last): its output
                        + allreduce(p, 4 * n)        // head: row maxima
                        + allreduce(p, 8 * n)        // head: sums of exponentials, target logits
                        + allreduce(p, 4 * n * 24);  // head: input gradient
  const int64_t tensor = units + allreduce(p, 8);    // the gradient norm (f64)
  const int64_t data_parallel = allreduce(d, 4 * held_elements(wide_widths(), 2));
  train::RunResult result;
  const TensorBytes b = step_bytes(tensor_spec(true, 4, 2), 3, &result);
  EXPECT_EQ(b.units, units);
  EXPECT_EQ(b.tensor, tensor);
  EXPECT_EQ(b.data_parallel, data_parallel);
  // The step result carries both groups together.
  ASSERT_EQ(result.logged.size(), 1U);
  EXPECT_EQ(result.logged[0].comm_bytes, tensor + data_parallel);
}

// gpt (kGpt4Heads: L = 2 blocks, d = 32, T = 16, vocabulary 64, head tied)
// on p = 2 ranks per tensor group x 2 replicas, N = 6 · 16 = 96 token rows
// per rank, in both modes. Per micro-batch the units send
//   (4L + 2) · 2(p−1)/p · 4·N·d   +   2(p−1)/p · 4 · 3N
// bytes: tensor mode has an allreduce of the N x d activations forward and
// one backward per column/row pair (2 pairs a block), the embedding's
// lookup forward and the head's input gradient backward; sequence mode
// replaces each allreduce by an allgather and a reduce-scatter of the same
// volume ((p−1)/p · 4·N·d each); the vocabulary-parallel cross-entropy
// allreduces 3 floats a row. Sequence mode adds one allreduce of the
// replicated tensors' gradients per step (R = T·d + 6·L·d + 2·d elements).
TEST(TensorTraffic, GptBytesPerStepMatchTheFormulaInBothModes) {
  const char* const table = kGpt4Heads;
  const int64_t p = 2;
  const int64_t l = 2;
  const int64_t d = 32;
  const int64_t t = 16;
  const int64_t n = kTensorBatch / 2 * t;
  const auto allreduce = [](int64_t group, int64_t b) { return 2 * (group - 1) * b / group; };
  const int64_t units = (4 * l + 2) * allreduce(p, 4 * n * d) + allreduce(p, 4 * 3 * n);
  const int64_t replicated = t * d + 6 * l * d + 2 * d;
  const TransformerCase shape{"gpt", table, 2, 4, d, t, 64, l};
  const int64_t data_parallel = allreduce(2, 4 * gpt_held_elements(shape));
  for (const bool sequence : {false, true}) {
    SCOPED_TRACE(sequence ? "sequence" : "tensor");
    train::RunResult result;
    const TensorBytes b = step_bytes(transformer_spec(table, 4, 2, sequence), 3, &result);
    EXPECT_EQ(b.units, units);
    EXPECT_EQ(b.tensor, units + allreduce(p, 8) + (sequence ? allreduce(p, 4 * replicated) : 0));
    EXPECT_EQ(b.data_parallel, data_parallel);
  }
}

// The tracked activation peak of gpt (kGpt4Heads, p = 2, one replica, N =
// 12 · 16 = 192 rows per rank) is lower under sequence parallelism by
// exactly the rows it does not keep: (N − N/p) rows of
//   per block: the input, residual sum and output (3d), both LayerNorms'
//              mean and rstd (4), and the input gradient (d);
//   embedding: its output (d);  head: its input and input gradient (2d)
//              and ln_f's mean and rstd (2);
// 4 bytes each. Everything else (the gathered LayerNorm outputs, q|k|v,
// attention, the MLP's activations, whole output gradients) is the same.
TEST(TensorMemory, SequenceModeSavesTheSplitRegions) {
  const int64_t p = 2;
  const int64_t l = 2;
  const int64_t d = 32;
  const int64_t n = kTensorBatch * 16;
  const int64_t saved = (n - n / p) * 4 * (l * (4 * d + 4) + d + 2 * d + 2);
  const train::RunResult tensor = run(transformer_spec(kGpt4Heads, 2, 2, false));
  const train::RunResult sequence = run(transformer_spec(kGpt4Heads, 2, 2, true));
  for (size_t r = 0; r < 2; ++r) {
    const int64_t a = tensor.memory[r].peak[TESSERA_MEM_ACTIVATIONS];
    const int64_t b = sequence.memory[r].peak[TESSERA_MEM_ACTIVATIONS];
    EXPECT_EQ(a - b, saved) << "rank " << r << ": tensor " << a << ", sequence " << b;
  }
}

RunSpec zero3_spec(bool wide, int world) {
  RunSpec s = tensor_spec(wide, world, 1);
  s.strategy = "zero3";
  s.strategy_options.clear();
  return s;
}

TEST(TensorResume, TensorCheckpointContinuesUnderZero3AndBack) {
  expect_continues(tensor_spec(true, 4, 2), zero3_spec(true, 3), "full");
  expect_continues(zero3_spec(true, 3), tensor_spec(true, 3, 3), "full");
}

// A checkpoint does not depend on the mode: gpt in sequence mode resumes
// in tensor mode at another size, and back.
TEST(TensorResume, SequenceModeCheckpointsContinueInTensorModeAndBack) {
  expect_continues(transformer_spec(kGpt4Heads, 4, 2, true),
                   transformer_spec(kGpt4Heads, 4, 4, false), "sharded");
  expect_continues(transformer_spec(kGpt4Heads, 4, 4, false),
                   transformer_spec(kGpt4Heads, 2, 2, true), "full");
}

TEST(TensorResume, ShardedCheckpointsMoveBetweenTensorSizesAndZero3) {
  expect_continues(tensor_spec(true, 4, 4), zero3_spec(true, 2), "sharded");
  expect_continues(zero3_spec(true, 2), tensor_spec(true, 4, 2), "sharded");
}

TEST(TensorOptions, SizeMustDivideTheWorld) {
  const std::string msg = refusal(tensor_spec(false, 3, 2));
  EXPECT_NE(msg.find("tensor: size = 2 does not divide the world size 3 (world = data-parallel "
                     "replicas x size)"),
            std::string::npos)
      << msg;
  const std::string negative = refusal(tensor_spec(false, 2, -1));
  EXPECT_NE(negative.find("tensor: size = -1 must be >= 1"), std::string::npos) << negative;
}

TEST(TensorOptions, ModeIsTensorOrSequence) {
  RunSpec s = tensor_spec(false, 2, 2);
  s.strategy_options += "mode = \"ring\"\n";
  const std::string other = refusal(s);
  EXPECT_NE(other.find("tensor: mode = \"ring\" is not one of tensor, sequence"), std::string::npos)
      << other;
}

// Before training, the model names its option and the strategy the group:
// mlp's first hidden layer has 32 features (not a multiple of 3), 4 gpt
// heads and 2 llama key/value heads do not split 3 ways, and in sequence
// mode neither do 8 positions (3 heads and a vocabulary of 48 do).
TEST(TensorOptions, WidthsTheGroupDoesNotDivideAreRefused) {
  const std::string msg = run_error(tensor_spec(false, 3, 3));
  EXPECT_NE(msg.find("tensor: [strategy.options] size = 3, mode = \"tensor\" cannot split the "
                     "model: tensor-parallel check: model 'mlp': unit 'layer0': key 'hidden[0]' "
                     "(32) is not divisible by the tensor-parallel group size 3"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find(".cpp:"), std::string::npos) << msg;
  const std::string heads = run_error(transformer_spec(
      "name = \"gpt\"\nlayers = 1\nd_model = 32\nheads = 4\nseq_len = 6\nvocab = 48\n", 3, 3,
      false));
  EXPECT_NE(heads.find("model 'gpt': unit 'block0': key 'heads' (4) is not divisible by the "
                       "tensor-parallel group size 3"),
            std::string::npos)
      << heads;
  const std::string positions = run_error(transformer_spec(kGpt3Heads, 3, 3, true));
  EXPECT_NE(positions.find("tensor: [strategy.options] size = 3, mode = \"sequence\" cannot "
                           "split the model: tensor-parallel check: model 'gpt': unit 'embed': "
                           "key 'seq_len' (8) is not divisible by the tensor-parallel group size "
                           "3, which sequence parallelism splits it by"),
            std::string::npos)
      << positions;
  const std::string kv = run_error(
      transformer_spec("name = \"llama\"\nlayers = 1\nd_model = 48\nheads = 6\nkv_heads = 2\n"
                       "seq_len = 6\nvocab = 30\nffn = 96\n",
                       3, 3, false));
  EXPECT_NE(kv.find("model 'llama': unit 'block0': key 'kv_heads' (2) is not divisible by the "
                    "tensor-parallel group size 3; key 'kv_replicated' = true keeps"),
            std::string::npos)
      << kv;
}

TEST(TensorOptions, UnitsWithoutTensorParallelismAreRefused) {
  PluginRegistry plugins;
  plugins.scan({TESSERA_STRATEGIES_PLUGIN_DIR, TESSERA_STRATEGIES_FIXTURE_DIR});
  RunSpec s = tensor_spec(false, 2, 2);
  s.model_table = "name = \"serial_mlp\"\n";
  const std::string msg = run_error(s, plugins);
  EXPECT_NE(msg.find("tensor: unit 'layer0' does not support tensor parallelism (no "
                     "TESSERA_UNIT_TENSOR_PARALLEL), so size = 2 cannot split it"),
            std::string::npos)
      << msg;
  // With size = 1 the same model trains.
  s.strategy_options = "size = 1\n";
  EXPECT_EQ(run_error(s, plugins), "");
}

}  // namespace
}  // namespace tessera::test

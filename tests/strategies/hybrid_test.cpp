// The `hybrid` strategy (3D parallelism: a dp x pp x tp mesh, tp
// innermost): gpt (its head tied to the embedding across the first and
// last stage) and llama (grouped key/value heads) on 4 and 8 ranks as
// 2x2x1, 1x2x2, 2x1x2 and 2x2x2, in tensor and sequence mode, under 1f1b,
// gpipe and zb1, against `none` on one rank: 20 AdamW steps, the final
// parameters within 1e-5 relative difference, replicas bit-identical, one
// run clipped, the optimizer state (zero1) and gradients (zero2) sharded
// over the data axis. A
// rank's tracked parameters, gradients and optimizer state are its stage's
// tensors (split ones / tp, replicated whole) plus the tied copy of a
// tensor another stage owns (the optimizer's / dp with zero1). Checkpoints move from 2x2x2
// through ddp to 1x2x2 and continue the run. Bad options and models are
// refused with the option or key named.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "resume_support.hpp"
#include "run_support.hpp"
#include "strategy_support.hpp"

namespace tessera::test {
namespace {

constexpr int64_t kHybridBatch = 12;

// One mesh: world = dp x tp x pp.
struct HybridMesh {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  [[nodiscard]] int world() const { return dp * tp * pp; }
};

RunSpec hybrid_spec(const std::string& model, HybridMesh m, int64_t micro_batches,
                    const std::string& more_options = "") {
  RunSpec s;
  s.model = model;
  s.strategy = "hybrid";
  s.world = m.world();
  s.batch = kHybridBatch;
  s.micro_batches = micro_batches;
  s.strategy_options = "dp = " + std::to_string(m.dp) + "\ntp = " + std::to_string(m.tp) +
                       "\npp = " + std::to_string(m.pp) + "\n" + more_options;
  return s;
}

// `none` on one rank with the settings of `s` that do not depend on the
// strategy (model, batch, clipping; one micro-batch).
RunSpec hybrid_reference(const RunSpec& s) {
  RunSpec none = s;
  none.strategy = "none";
  none.world = 1;
  none.micro_batches = 1;
  none.strategy_options.clear();
  none.extra_toml.clear();
  return none;
}

struct HybridCase {
  std::string model;
  HybridMesh mesh;
  int64_t micro = 2;
  std::string schedule = "1f1b";
  bool sequence = false;
  double grad_clip = 1.0;
  std::string dp_shard = "none";
};

std::string hybrid_case_text(const HybridCase& c) {
  return c.model + "_dp" + std::to_string(c.mesh.dp) + "_tp" + std::to_string(c.mesh.tp) + "_pp" +
         std::to_string(c.mesh.pp) + "_" + c.schedule + "_m" + std::to_string(c.micro) +
         (c.sequence ? "_sequence" : "") + (c.grad_clip < 1.0 ? "_clipped" : "") +
         (c.dp_shard != "none" ? "_" + c.dp_shard : "");
}

void PrintTo(const HybridCase& c, std::ostream* os) { *os << hybrid_case_text(c); }

class HybridEquivalence : public ::testing::TestWithParam<HybridCase> {};

TEST_P(HybridEquivalence, MatchesNoneOnOneRankAndReplicasAgree) {
  const HybridCase& c = GetParam();
  std::string options = "schedule = \"" + c.schedule + "\"\n";
  if (c.sequence) options += "mode = \"sequence\"\n";
  options += "dp_shard = \"" + c.dp_shard + "\"\n";
  RunSpec s = hybrid_spec(c.model, c.mesh, c.micro, options);
  s.grad_clip = c.grad_clip;
  const train::RunResult result = run(s);
  const train::RunResult& ref = cached(hybrid_reference(s));
  const int world = c.mesh.world();
  ASSERT_EQ(result.last_step, 20);
  ASSERT_EQ(result.final_state.size(), static_cast<size_t>(world));
  // Rank r and rank r mod (tp x pp) hold the same place of the mesh in
  // another replica; the global norm sums shards over the tensor group and
  // the stages, tied and replicated tensors once. (With zero1/2 each
  // replica writes its own slices of the optimizer state, so their pieces
  // differ by design: no rank is compared, and merged() still refuses
  // pieces of one tensor that disagree.)
  const int replica = c.mesh.tp * c.mesh.pp;
  expect_matches_reference(result, ref, c.dp_shard != "none" ? world : replica);
  if (c.grad_clip < 1.0) {
    EXPECT_GT(ref.logged[0].grad_norm, c.grad_clip) << "the reference run does not clip";
  }
}

std::string hybrid_case_name(const ::testing::TestParamInfo<HybridCase>& info) {
  return hybrid_case_text(info.param);
}

// The default tiny models (gpt and llama with 2 blocks: 4 units, so each
// of 2 stages has 2). Two micro-batches per step (1f1b needs >= pp), four
// for zb1.
std::vector<HybridCase> mesh_matrix() {
  std::vector<HybridCase> cases;
  for (const char* model : {"gpt", "llama"}) {
    for (const HybridMesh m :
         {HybridMesh{2, 2, 1}, HybridMesh{1, 2, 2}, HybridMesh{2, 1, 2}, HybridMesh{2, 2, 2}}) {
      cases.push_back(HybridCase{model, m});
    }
    for (const HybridMesh m : {HybridMesh{1, 2, 2}, HybridMesh{2, 2, 2}}) {
      HybridCase c{model, m};
      c.sequence = true;
      cases.push_back(c);
    }
    // The optimizer state (zero1), and the gradients too (zero2), sharded
    // over the data axis.
    for (const char* shard : {"zero1", "zero2"}) {
      for (const bool sequence : {false, true}) {
        HybridCase c{model, HybridMesh{2, 2, 2}};
        c.sequence = sequence;
        c.dp_shard = shard;
        cases.push_back(c);
      }
    }
  }
  for (const char* shard : {"zero1", "zero2"}) {
    cases.push_back(HybridCase{"gpt", HybridMesh{4, 2, 1}, 1, "1f1b", false, 0.1, shard});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Meshes, HybridEquivalence, ::testing::ValuesIn(mesh_matrix()),
                         hybrid_case_name);

// The other schedules on 1x2x2 (interleaved: 2 chunks per stage, one unit
// each, in sequence mode), and 2x2x2 clipped at every step (the reference
// norms exceed 0.1).
INSTANTIATE_TEST_SUITE_P(
    Schedules, HybridEquivalence,
    ::testing::Values(HybridCase{"gpt", HybridMesh{1, 2, 2}, 4, "zb1"},
                      HybridCase{"gpt", HybridMesh{1, 2, 2}, 2, "gpipe"},
                      HybridCase{"llama", HybridMesh{1, 2, 2}, 4, "zb1"},
                      HybridCase{"gpt", HybridMesh{1, 2, 2}, 2, "interleaved", true},
                      HybridCase{"gpt", HybridMesh{2, 2, 2}, 2, "1f1b", false, 0.1}),
    hybrid_case_name);

// Elements of the default gpt (run_support's model_toml: d_model 32,
// seq_len 16, vocabulary 64, 2 blocks, MLP width 4 d) on 2 stages split
// explicitly as embed block0 | block1 head, per rank of a tensor group of
// `tp`: split tensors (the token embedding by vocabulary; q|k|v, the
// attention projection and both MLP matrices with the column biases) / tp,
// replicated ones (the position embedding, the LayerNorms, the row
// projections' biases) whole; the head's stage also holds a copy of the
// tied token embedding, a shard of it like the embedding's.
struct GptStages {
  int64_t stage0 = 0;
  int64_t stage1 = 0;
};
GptStages gpt_stage_elements(int64_t tp) {
  const int64_t d = 32;
  const int64_t t = 16;
  const int64_t vocab = 64;
  const int64_t h = 4 * d;
  const int64_t block_split = 3 * d * d + 3 * d + d * d + d * h + h + h * d;
  const int64_t block_replicated = 6 * d;
  const int64_t wte = vocab * d;
  return {(wte + block_split) / tp + t * d + block_replicated,
          (block_split + wte) / tp + block_replicated + 2 * d};
}

TEST(HybridMemory, RanksHoldTheirStagesShardsAndTheTiedCopy) {
  // The formula's numbers: 14560 split and 704 (stage 0) or 256 (stage 1)
  // replicated elements.
  EXPECT_EQ(gpt_stage_elements(1).stage0, 14560 + 704);
  EXPECT_EQ(gpt_stage_elements(2).stage1, 14560 / 2 + 256);
  for (const HybridMesh m : {HybridMesh{1, 2, 2}, HybridMesh{2, 2, 2}}) {
    const RunSpec s = hybrid_spec("gpt", m, 2, "partition = \"explicit\"\nboundaries = [2]\n");
    const std::string where = "dp " + std::to_string(m.dp) + " x tp 2 x pp 2";
    const train::RunResult result = run(s);
    const GptStages held = gpt_stage_elements(m.tp);
    std::vector<PersistentBytes> expected;
    for (int r = 0; r < m.world(); ++r) {
      // tp innermost: rank r is on stage (r / tp) mod pp.
      const int64_t n = (r / m.tp) % m.pp == 0 ? held.stage0 : held.stage1;
      expected.push_back({4 * n, 4 * n, 8 * n});  // AdamW: two slots
    }
    expect_persistent_peaks(result, expected, where);
    // The explicit split trains the same model.
    std::string worst;
    EXPECT_LE(
        max_param_rel_diff(merged(result), cached(hybrid_reference(s)).final_state[0], &worst),
        kTolerance)
        << where << ": largest difference in " << worst;
  }
}

// With dp_shard = "zero1" replica r keeps the optimizer state of the held
// elements [r S, (r+1) S), S = ceil(n / dp), and the parameter buffer is
// padded to dp S for the allgather; with "zero2" the gradient buffer too,
// for the reduce-scatter (it still holds every element: the micro-batches
// accumulate into it during the backward).
TEST(HybridMemory, ZeroOneAndTwoShardTheOptimizerStateOverTheDataAxis) {
  const HybridMesh m{2, 2, 2};
  for (const bool zero2 : {false, true}) {
    const RunSpec s = hybrid_spec("gpt", m, 2,
                                  std::string("partition = \"explicit\"\nboundaries = [2]\n") +
                                      "dp_shard = \"" + (zero2 ? "zero2" : "zero1") + "\"\n");
    const train::RunResult result = run(s);
    const GptStages held = gpt_stage_elements(m.tp);
    std::vector<PersistentBytes> expected;
    for (int r = 0; r < m.world(); ++r) {
      const int64_t n = (r / m.tp) % m.pp == 0 ? held.stage0 : held.stage1;
      const int64_t slice = (n + m.dp - 1) / m.dp;
      expected.push_back({4 * m.dp * slice, zero2 ? 4 * m.dp * slice : 4 * n, 8 * slice});
    }
    expect_persistent_peaks(result, expected, zero2 ? "2x2x2 zero2" : "2x2x2 zero1");
  }
}

// Rank 0's bytes per axis in step 3 of gpt on 2x2x2 (stages embed block0 |
// block1 head), from its debug line "hybrid: step 3 rank 0: tp group sent
// N bytes (units M), pp group K bytes, dp group L bytes". Per micro-batch
// (2 of them; 3 examples x 16 positions = 48 token rows of width 32 on a
// replica), with the ring volumes of sdk::CommView (an allreduce of b
// bytes over 2 ranks sends b):
//   tp: the units' allreduces of 4·48·32 bytes: the embedding's lookup and
//       block0's two pairs forward and backward, 5 of them;
//   pp: the activations to stage 1 and their shape message (3 int64), plus
//       once per step the allreduce (max) of 2 doubles for the bubble;
//   dp: each unit's gradients once, 4·n0 bytes for stage 0's n0 elements.
TEST(HybridTraffic, BytesPerAxisMatchTheFormula) {
  const RunSpec s =
      hybrid_spec("gpt", HybridMesh{2, 2, 2}, 2, "partition = \"explicit\"\nboundaries = [2]\n");
  const std::string log = debug_log_of(s, "strategy.hybrid");
  const std::string prefix = "hybrid: step 3 rank 0: tp group sent ";
  const size_t at = log.find(prefix);
  ASSERT_NE(at, std::string::npos) << log.substr(0, 2000);
  int64_t tp = -1;
  int64_t units = -1;
  int64_t pp = -1;
  int64_t dp = -1;
  std::string w[8];
  std::istringstream fields(log.substr(at + prefix.size()));
  fields >> tp >> w[0] >> w[1] >> units >> w[2] >> w[3] >> w[4] >> pp >> w[5] >> w[6] >> w[7] >> dp;
  ASSERT_TRUE(fields) << log.substr(at, 200);
  const int64_t activations = 4 * 48 * 32;
  EXPECT_EQ(units, 2 * 5 * activations);
  EXPECT_EQ(tp, units);
  EXPECT_EQ(pp, 2 * (activations + 3 * 8) + 16);
  EXPECT_EQ(dp, 4 * gpt_stage_elements(2).stage0);
}

// zero2 sends a reduce-scatter of the held gradients where zero1 sends an
// allreduce: per step and rank, (dp-1)/dp of the padded buffer less.
TEST(HybridTraffic, ZeroTwoSendsLessThanZeroOne) {
  const HybridMesh m{2, 2, 2};
  const auto sent = [&](const char* shard) {
    const train::RunResult r =
        run(hybrid_spec("gpt", m, 2, std::string("dp_shard = \"") + shard + "\"\n"));
    return r.logged.at(0).comm_bytes;
  };
  const int64_t zero1 = sent("zero1");
  const int64_t zero2 = sent("zero2");
  EXPECT_LT(zero2, zero1);
}

// The chain: 2x2x2 on 8 ranks to step 7, ddp on 3 ranks to step 14, 1x2x2
// on 4 ranks to step 20, against 20 uninterrupted steps of the first.
TEST(HybridResume, HybridThenDdpThenAnotherMeshContinuesTheRun) {
  const RunSpec first = hybrid_spec("gpt", HybridMesh{2, 2, 2}, 2);
  RunSpec ddp = hybrid_reference(first);
  ddp.strategy = "ddp";
  ddp.world = 3;
  ddp.micro_batches = 2;
  expect_chain_continues(first, ddp, hybrid_spec("gpt", HybridMesh{1, 2, 2}, 2));
}

// Sharded checkpoints (each rank its shards as boxes) between meshes.
TEST(HybridResume, ShardedCheckpointsMoveBetweenMeshes) {
  expect_continues(hybrid_spec("gpt", HybridMesh{2, 2, 2}, 2),
                   hybrid_spec("gpt", HybridMesh{1, 2, 2}, 2), "sharded");
}

// The optimizer state written in slices by the replicas of a zero1 mesh,
// read whole by another mesh, and back into other slices.
TEST(HybridResume, ZeroOneOptimizerSlicesMoveBetweenMeshes) {
  const std::string zero1 = "dp_shard = \"zero1\"\n";
  expect_continues(hybrid_spec("gpt", HybridMesh{2, 2, 2}, 2, zero1),
                   hybrid_spec("gpt", HybridMesh{1, 2, 2}, 2), "full");
  expect_continues(hybrid_spec("gpt", HybridMesh{1, 2, 2}, 2),
                   hybrid_spec("gpt", HybridMesh{4, 1, 1}, 1, zero1), "sharded");
  expect_continues(hybrid_spec("gpt", HybridMesh{2, 2, 2}, 2, "dp_shard = \"zero2\"\n"),
                   hybrid_spec("gpt", HybridMesh{2, 1, 2}, 2, "dp_shard = \"zero2\"\n"), "sharded");
}

TEST(HybridOptions, TheMeshMustBeTheWorld) {
  RunSpec s = hybrid_spec("gpt", HybridMesh{2, 2, 2}, 2);
  s.world = 4;
  const std::string msg = refusal(s);
  EXPECT_NE(msg.find("hybrid: dp x tp x pp = 2 x 2 x 2 must be the world size 4"),
            std::string::npos)
      << msg;
}

// 4 heads do not split 3 ways (the vocabulary 48 does): the model's check
// refuses before training, naming the option, the unit and its key.
TEST(HybridOptions, TpTheHeadsDoNotDivideIsRefused) {
  RunSpec s = hybrid_spec("gpt", HybridMesh{1, 3, 2}, 2);
  s.model_table = "name = \"gpt\"\nlayers = 2\nd_model = 32\nheads = 4\nseq_len = 6\nvocab = 48\n";
  const std::string msg = run_error(s);
  EXPECT_NE(msg.find("hybrid: [strategy.options] tp = 3, mode = \"tensor\" cannot split the "
                     "model: tensor-parallel check: model 'gpt': unit 'block0': key 'heads' (4) "
                     "is not divisible by the tensor-parallel group size 3"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find(".cpp:"), std::string::npos) << msg;
}

TEST(HybridOptions, MoreStagesThanUnitsIsRefused) {
  // gpt with 2 blocks has 4 units.
  const std::string msg = run_error(hybrid_spec("gpt", HybridMesh{1, 1, 5}, 5));
  EXPECT_NE(msg.find("hybrid: pp = 5 is more than the model's 4 units"), std::string::npos) << msg;
}

TEST(HybridOptions, OneFOneBNeedsAMicroBatchPerStage) {
  const std::string msg = run_error(hybrid_spec("gpt", HybridMesh{1, 2, 2}, 1));
  EXPECT_NE(
      msg.find("create: hybrid: schedule = \"1f1b\" needs data.micro_batches >= pp (2), but a step "
               "has 1 micro-batches"),
      std::string::npos)
      << msg;
}

TEST(HybridOptions, DataAxisShardingIsNoneZeroOneOrZeroTwo) {
  const std::string other =
      refusal(hybrid_spec("gpt", HybridMesh{2, 2, 1}, 2, "dp_shard = \"zero3\"\n"));
  EXPECT_NE(other.find("hybrid: dp_shard = \"zero3\" is not one of none, zero1, zero2"),
            std::string::npos)
      << other;
}

TEST(HybridOptions, ModeIsTensorOrSequence) {
  const std::string msg = refusal(hybrid_spec("gpt", HybridMesh{1, 2, 2}, 2, "mode = \"ring\"\n"));
  EXPECT_NE(msg.find("hybrid: mode = \"ring\" is not one of tensor, sequence"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace tessera::test

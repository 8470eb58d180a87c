// The `pipeline` strategy: every schedule (gpipe, 1f1b, interleaved, zb1)
// on 2, 3 and 4 stages (uneven unit counts included) and with
// data-parallel replicas (dp x stages = 4) against `none` on one rank, on
// mlp, gpt (its embedding and head tied across the first and last stage)
// and llama: 20 AdamW steps with clipping, the final parameters within
// 1e-5 relative difference and the replicas of a stage bit-identical.
// Checkpoints move between pipeline and zero3 at other world sizes, full
// and sharded, and continue the uninterrupted run; a stage holds only its
// units' parameters, and 1f1b and zb1 hold p/m of gpipe's activations. The
// metrics carry the measured bubbles next to the formula. Bad options are
// refused before training with the option named.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "resume_support.hpp"
#include "run_support.hpp"
#include "strategy_support.hpp"

namespace tessera::test {
namespace {

constexpr int64_t kBatch = 12;

// The models with more units, for interleaved chunks (8 units: 4 stages x
// 2 chunks): mlp with 4 hidden layers, gpt and llama with 6 blocks.
std::string deep_table(const std::string& model) {
  if (model == "gpt") {
    return "name = \"gpt\"\nlayers = 6\nd_model = 32\nheads = 2\nseq_len = 16\nvocab = 64\n";
  }
  if (model == "llama") {
    return "name = \"llama\"\nlayers = 6\nd_model = 16\nheads = 4\nkv_heads = 2\nseq_len = 8\n"
           "vocab = 32\n";
  }
  return "name = \"mlp\"\ninput = 16\nhidden = [32, 24, 16, 16, 16, 16, 16]\nclasses = 5\n"
         "activation = \"gelu\"\n";
}

// 5 units, for uneven splits over 3 and 4 stages: mlp with 4 hidden
// layers, gpt and llama with 3 blocks.
std::string mid_table(const std::string& model) {
  if (model == "gpt") {
    return "name = \"gpt\"\nlayers = 3\nd_model = 32\nheads = 2\nseq_len = 16\nvocab = 64\n";
  }
  if (model == "llama") {
    return "name = \"llama\"\nlayers = 3\nd_model = 16\nheads = 4\nkv_heads = 2\nseq_len = 8\n"
           "vocab = 32\n";
  }
  return "name = \"mlp\"\ninput = 16\nhidden = [32, 24, 16, 16]\nclasses = 5\n"
         "activation = \"gelu\"\n";
}

// The model tables by depth: 0 the run_support defaults (mlp 3 units, gpt
// and llama 4), 1 mid_table (5), 2 deep_table (8).
std::string table_of(const std::string& model, int depth) {
  if (depth == 1) return mid_table(model);
  if (depth == 2) return deep_table(model);
  return "";
}

const train::RunResult& none_reference(const std::string& model, int depth = 0) {
  static std::map<std::string, train::RunResult> cache;
  const std::string key = model + "-" + std::to_string(depth);
  auto it = cache.find(key);
  if (it == cache.end()) {
    RunSpec s;
    s.model = model;
    s.model_table = table_of(model, depth);
    s.strategy = "none";
    s.batch = kBatch;
    it = cache.emplace(key, run(s)).first;
  }
  return it->second;
}

RunSpec pipeline_spec(const std::string& model, int world, const std::string& options,
                      int64_t micro_batches, int depth = 0) {
  RunSpec s;
  s.model = model;
  s.model_table = table_of(model, depth);
  s.strategy = "pipeline";
  s.world = world;
  s.batch = kBatch;
  s.micro_batches = micro_batches;
  s.strategy_options = options;
  return s;
}

struct PipeCase {
  std::string model;
  std::string schedule;
  int stages;
  int world;
  int64_t micro;
  int virtual_stages = 0;  // interleaved
  int depth = 0;           // the model tables of table_of
};

void PrintTo(const PipeCase& c, std::ostream* os) {
  *os << c.model << "_" << c.schedule << "_stages" << c.stages << "_world" << c.world << "_v"
      << c.virtual_stages << "_m" << c.micro << "_depth" << c.depth;
}

class PipelineEquivalence : public ::testing::TestWithParam<PipeCase> {};

TEST_P(PipelineEquivalence, MatchesNoneOnOneRankAndReplicasAgree) {
  const PipeCase& c = GetParam();
  std::string options =
      "stages = " + std::to_string(c.stages) + "\nschedule = \"" + c.schedule + "\"\n";
  if (c.virtual_stages != 0)
    options += "virtual_stages = " + std::to_string(c.virtual_stages) + "\n";
  const train::RunResult result = run(pipeline_spec(c.model, c.world, options, c.micro, c.depth));
  const train::RunResult& ref = none_reference(c.model, c.depth);
  ASSERT_EQ(result.last_step, 20);
  ASSERT_EQ(result.final_state.size(), static_cast<size_t>(c.world));
  for (int r = c.stages; r < c.world; ++r) {
    EXPECT_EQ(first_bit_difference(result.final_state[static_cast<size_t>(r)],
                                   result.final_state[static_cast<size_t>(r % c.stages)]),
              "")
        << "rank " << r << " differs from rank " << r % c.stages << " (same stage)";
  }
  const train::CollectedState all = merged(result);
  EXPECT_EQ(tensor_names(all), tensor_names(ref.final_state[0]));
  std::string worst;
  const double diff = max_param_rel_diff(all, ref.final_state[0], &worst);
  EXPECT_LE(diff, kTolerance) << "largest difference in " << worst;
  EXPECT_NEAR(result.final_loss, ref.final_loss, 1e-4 * std::fabs(ref.final_loss));
}

// Every schedule at 2, 3 and 4 stages on every model: 2 stages x 2
// replicas, 3 stages (uneven: 5 units, interleaved 8 units on 6 chunks),
// 4 stages (mlp 5 units; interleaved 8 units on 8 chunks); gpipe with
// fewer micro-batches than stages, interleaved with 2 per stage.
std::vector<PipeCase> schedule_matrix() {
  std::vector<PipeCase> cases;
  for (const char* model : {"mlp", "gpt", "llama"}) {
    const bool mlp = std::string(model) == "mlp";
    for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zb1"}) {
      const bool interleaved = std::string(schedule) == "interleaved";
      for (const int stages : {2, 3, 4}) {
        PipeCase c{model, schedule, stages, stages == 3 ? 3 : 4, 0};
        if (interleaved) {
          c.virtual_stages = 2;
          c.depth = stages == 2 && !mlp ? 0 : 2;
          c.micro = 2 * stages;
        } else {
          c.depth = stages == 3 || (stages == 4 && mlp) ? 1 : 0;
          const std::string s = schedule;
          c.micro = s == "gpipe" ? stages - 1 : (s == "1f1b" ? stages + 1 : stages + 2);
        }
        cases.push_back(c);
      }
    }
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<PipeCase>& info) {
  const PipeCase& c = info.param;
  return c.model + "_" + c.schedule + "_stages" + std::to_string(c.stages) + "_world" +
         std::to_string(c.world) + "_m" + std::to_string(c.micro) +
         (c.virtual_stages > 0 ? "_v" + std::to_string(c.virtual_stages) : std::string()) +
         "_units" +
         std::to_string(c.depth == 0 ? (c.model == "mlp" ? 3 : 4) : (c.depth == 1 ? 5 : 8));
}

INSTANTIATE_TEST_SUITE_P(Matrix, PipelineEquivalence, ::testing::ValuesIn(schedule_matrix()),
                         case_name);

// Edges: 1f1b and zb1 with exactly as many micro-batches as stages, zb1
// with fewer (one), interleaved with m = stages (Megatron-LM's all
// forwards first) and with v = 3, and stages x replicas with one stage.
INSTANTIATE_TEST_SUITE_P(Edges, PipelineEquivalence,
                         ::testing::Values(PipeCase{"gpt", "1f1b", 4, 4, 4},
                                           PipeCase{"mlp", "zb1", 3, 3, 3, 0, 1},
                                           PipeCase{"mlp", "zb1", 2, 4, 1},
                                           PipeCase{"gpt", "interleaved", 2, 2, 2, 2},
                                           PipeCase{"gpt", "interleaved", 2, 2, 6, 3, 2},
                                           PipeCase{"llama", "1f1b", 1, 4, 2}),
                         case_name);

// Stage boundaries given explicitly (gpt: embed | block0 block1 | head)
// train the same model.
TEST(PipelinePartition, ExplicitBoundariesMatchNone) {
  const train::RunResult result = run(
      pipeline_spec("gpt", 3, "stages = 3\npartition = \"explicit\"\nboundaries = [1, 3]\n", 3));
  std::string worst;
  EXPECT_LE(max_param_rel_diff(merged(result), none_reference("gpt").final_state[0], &worst),
            kTolerance)
      << worst;
}

// A stage holds its own units' parameters only, and 1f1b keeps fewer
// micro-batches of activations alive on the first stage than gpipe (at most
// stages of them instead of all m).
TEST(PipelineMemory, StagesHoldTheirUnitsAndOneFOneBHoldsFewerActivations) {
  const int64_t m = 4;
  const train::RunResult gpipe =
      run(pipeline_spec("gpt", 2, "stages = 2\nschedule = \"gpipe\"\n", m));
  const train::RunResult one_f_one_b =
      run(pipeline_spec("gpt", 2, "stages = 2\nschedule = \"1f1b\"\n", m));
  const train::RunResult& ref = none_reference("gpt");
  ASSERT_EQ(gpipe.memory.size(), 2U);
  ASSERT_EQ(one_f_one_b.memory.size(), 2U);
  const int64_t all_params = ref.memory[0].peak[TESSERA_MEM_PARAMS];
  const int64_t stage0 = gpipe.memory[0].peak[TESSERA_MEM_PARAMS];
  const int64_t stage1 = gpipe.memory[1].peak[TESSERA_MEM_PARAMS];
  EXPECT_LT(stage0, all_params);
  EXPECT_LT(stage1, all_params);
  // The head's stage also holds a copy of the tied embedding.
  EXPECT_GE(stage0 + stage1, all_params);
  const int64_t act_gpipe = gpipe.memory[0].peak[TESSERA_MEM_ACTIVATIONS];
  const int64_t act_1f1b = one_f_one_b.memory[0].peak[TESSERA_MEM_ACTIVATIONS];
  EXPECT_GT(act_1f1b, 0);
  EXPECT_LT(act_1f1b, act_gpipe);
}

// zb1 keeps a micro-batch's contexts from its forward to its weight half,
// at most p of them (1f1b's peak on stage 0), where gpipe keeps all m.
TEST(PipelineMemory, ZeroBubbleHoldsNoMoreActivationsThanOneFOneB) {
  const int64_t m = 6;  // equal micro-batches of kBatch / m examples
  const auto stage0_peak = [&](const std::string& schedule) {
    const train::RunResult r =
        run(pipeline_spec("mlp", 2, "stages = 2\nschedule = \"" + schedule + "\"\n", m));
    return r.memory.at(0).peak[TESSERA_MEM_ACTIVATIONS];
  };
  const int64_t gpipe = stage0_peak("gpipe");
  const int64_t one_f_one_b = stage0_peak("1f1b");
  const int64_t zb1 = stage0_peak("zb1");
  EXPECT_GT(zb1, 0);
  EXPECT_LE(zb1, one_f_one_b);
  EXPECT_LE(zb1 * m, gpipe * 2) << "more than p / m of gpipe's peak";
}

TEST(PipelineResume, PipelineCheckpointContinuesUnderZero3AtAnotherWorldSize) {
  RunSpec zero3 = pipeline_spec("gpt", 3, "", 3);
  zero3.strategy = "zero3";
  expect_continues(pipeline_spec("gpt", 4, "stages = 2\n", 3), zero3);
}

TEST(PipelineResume, Zero3CheckpointContinuesUnderThreeStages) {
  RunSpec zero3 = pipeline_spec("gpt", 3, "", 3);
  zero3.strategy = "zero3";
  expect_continues(zero3, pipeline_spec("gpt", 3, "stages = 3\n", 3));
}

// The chain: 2 stages x 2 replicas to step 7, zero3 on 3 ranks to
// step 14, 3 stages to step 20, against 20 uninterrupted steps of the first.
TEST(PipelineResume, PipelineThenZero3ThenThreeStagesContinuesTheRun) {
  RunSpec zero3 = pipeline_spec("gpt", 3, "", 3);
  zero3.strategy = "zero3";
  expect_chain_continues(pipeline_spec("gpt", 4, "stages = 2\n", 3), zero3,
                         pipeline_spec("gpt", 3, "stages = 3\n", 3));
}

TEST(PipelineResume, ShardedCheckpointsMoveBetweenPipelineAndZero3) {
  RunSpec zero3 = pipeline_spec("llama", 2, "", 4);
  zero3.strategy = "zero3";
  expect_continues(pipeline_spec("llama", 4, "stages = 4\nschedule = \"gpipe\"\n", 4), zero3,
                   "sharded");
  expect_continues(zero3, pipeline_spec("llama", 4, "stages = 2\n", 4), "sharded");
}

// The log step's metrics carry the measured bubble (the stages' mean idle
// share of the schedule by the wall clock and on the schedule's CPU clock,
// fractions) next to the schedule's formula,
// (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v m+p-1) interleaved; strategies without a pipeline
// report neither.
TEST(PipelineBubble, MeasuredBubbleIsAFractionNextToTheFormula) {
  struct Case {
    std::string schedule;
    int stages;
    int64_t micro;
    double formula;
  };
  for (const Case& c : {Case{"gpipe", 2, 4, 1.0 / 5.0}, Case{"1f1b", 4, 4, 3.0 / 7.0},
                        Case{"1f1b", 2, 3, 1.0 / 4.0}, Case{"interleaved", 2, 4, 1.0 / 9.0}}) {
    // gpt: 4 units, enough for 4 stages or 2 stages x 2 chunks (v = 2:
    // (p-1)/(v m+p-1)).
    const train::RunResult result = run(pipeline_spec(
        "gpt", c.stages,
        "stages = " + std::to_string(c.stages) + "\nschedule = \"" + c.schedule + "\"\n", c.micro));
    ASSERT_EQ(result.logged.size(), 1U) << c.schedule;
    const train::StepMetrics& m = result.logged[0];
    EXPECT_DOUBLE_EQ(m.bubble_formula, c.formula) << c.schedule << " p=" << c.stages;
    EXPECT_GT(m.bubble, 0.0) << c.schedule << " p=" << c.stages;
    EXPECT_LE(m.bubble, 1.0) << c.schedule << " p=" << c.stages;
    EXPECT_GT(m.bubble_cpu, 0.0) << c.schedule << " p=" << c.stages;
    EXPECT_LE(m.bubble_cpu, 1.0) << c.schedule << " p=" << c.stages;
  }
  // zb1, the halves of the backward each one slot:
  // (p-1)/(3m+p-1).
  const train::RunResult zb1 = run(pipeline_spec("mlp", 2, "schedule = \"zb1\"\n", 4));
  EXPECT_DOUBLE_EQ(zb1.logged[0].bubble_formula, 1.0 / 13.0);
  EXPECT_GT(zb1.logged[0].bubble, 0.0);
  EXPECT_LE(zb1.logged[0].bubble, 1.0);
  EXPECT_GT(zb1.logged[0].bubble_cpu, 0.0);
  EXPECT_LE(zb1.logged[0].bubble_cpu, 1.0);
  const train::RunResult one_stage = run(pipeline_spec("mlp", 1, "", 2));
  EXPECT_EQ(one_stage.logged[0].bubble_formula, 0.0);
  EXPECT_EQ(none_reference("mlp").logged[0].bubble, 0.0);
  EXPECT_EQ(none_reference("mlp").logged[0].bubble_cpu, 0.0);
  EXPECT_EQ(none_reference("mlp").logged[0].bubble_formula, 0.0);
}

TEST(PipelineOptions, StagesMustDivideTheWorld) {
  const std::string msg = refusal(pipeline_spec("mlp", 3, "stages = 2\n", 2));
  EXPECT_NE(msg.find("stages = 2 does not divide the world size 3"), std::string::npos) << msg;
}

TEST(PipelineOptions, UnwrittenSchedulesAreRefused) {
  const std::string msg = refusal(pipeline_spec("mlp", 2, "schedule = \"1f2b\"\n", 2));
  EXPECT_NE(msg.find("schedule = \"1f2b\" is not one of gpipe, 1f1b, interleaved, zb1"),
            std::string::npos)
      << msg;
}

TEST(PipelineOptions, InterleavedNeedsTwoVirtualStagesAndTwoStages) {
  const std::string one =
      refusal(pipeline_spec("gpt", 2, "schedule = \"interleaved\"\nvirtual_stages = 1\n", 2));
  EXPECT_NE(one.find("virtual_stages = 1 must be >= 2 for schedule = \"interleaved\""),
            std::string::npos)
      << one;
  const std::string other =
      refusal(pipeline_spec("gpt", 2, "schedule = \"1f1b\"\nvirtual_stages = 2\n", 2));
  EXPECT_NE(other.find("virtual_stages = 2 is set but schedule = \"1f1b\""), std::string::npos)
      << other;
  const std::string many =
      refusal(pipeline_spec("gpt", 2, "schedule = \"interleaved\"\nvirtual_stages = 1048577\n", 2));
  EXPECT_NE(many.find("virtual_stages = 1048577 is more than 1048576"), std::string::npos) << many;
  const std::string alone = refusal(pipeline_spec("gpt", 1, "schedule = \"interleaved\"\n", 2));
  EXPECT_NE(alone.find("schedule = \"interleaved\" needs stages >= 2, but there is 1 stage"),
            std::string::npos)
      << alone;
  const std::string bounds = refusal(pipeline_spec(
      "gpt", 2, "schedule = \"interleaved\"\npartition = \"explicit\"\nboundaries = [2]\n", 2));
  EXPECT_NE(bounds.find("boundaries has 1 entries, but 2 stages x 2 virtual_stages = 4 model "
                        "chunks need 3"),
            std::string::npos)
      << bounds;
}

TEST(PipelineOptions, InterleavedNeedsAChunkPerUnit) {
  // gpt with 2 blocks has 4 units.
  const std::string msg = run_error(
      pipeline_spec("gpt", 2, "stages = 2\nschedule = \"interleaved\"\nvirtual_stages = 3\n", 2));
  EXPECT_NE(msg.find("stages x virtual_stages = 2 x 3 = 6 model chunks is more than the model's 4 "
                     "units"),
            std::string::npos)
      << msg;
}

// The host says data.micro_batches at create (strategy 2.9), so the
// schedule's refusal comes there, before any state is loaded.
TEST(PipelineOptions, InterleavedNeedsMicroBatchesAMultipleOfStages) {
  const std::string msg =
      run_error(pipeline_spec("gpt", 2, "stages = 2\nschedule = \"interleaved\"\n", 3));
  EXPECT_NE(msg.find("create: pipeline: schedule = \"interleaved\" needs data.micro_batches to be "
                     "a multiple of "
                     "stages (2), as Megatron-LM's interleaved schedule does, but a step has 3 "
                     "micro-batches"),
            std::string::npos)
      << msg;
}

TEST(PipelineOptions, BoundariesMustIncrease) {
  const std::string msg = refusal(
      pipeline_spec("gpt", 3, "stages = 3\npartition = \"explicit\"\nboundaries = [2, 2]\n", 3));
  EXPECT_NE(msg.find("boundaries must be increasing unit indices >= 1, but entry 1 is 2 after 2"),
            std::string::npos)
      << msg;
  const std::string count = refusal(
      pipeline_spec("gpt", 3, "stages = 3\npartition = \"explicit\"\nboundaries = [2]\n", 3));
  EXPECT_NE(count.find("boundaries has 1 entries, but 3 stages need 2"), std::string::npos)
      << count;
  const std::string balanced = refusal(pipeline_spec("gpt", 2, "boundaries = [2]\n", 2));
  EXPECT_NE(balanced.find("boundaries is set but partition = \"balanced\""), std::string::npos)
      << balanced;
}

TEST(PipelineOptions, BoundaryPastTheLastUnitIsRefused) {
  const std::string msg = run_error(
      pipeline_spec("gpt", 2, "stages = 2\npartition = \"explicit\"\nboundaries = [4]\n", 2));
  EXPECT_NE(msg.find("boundaries entry 0 is 4, out of range: the model has 4 units"),
            std::string::npos)
      << msg;
}

TEST(PipelineOptions, MoreStagesThanUnitsIsRefused) {
  // mlp with two hidden layers has 3 units.
  const std::string msg = run_error(pipeline_spec("mlp", 4, "stages = 4\n", 4));
  EXPECT_NE(msg.find("stages = 4 is more than the model's 3 units"), std::string::npos) << msg;
}

TEST(PipelineOptions, OneFOneBNeedsAMicroBatchPerStage) {
  const std::string msg =
      run_error(pipeline_spec("mlp", 2, "stages = 2\nschedule = \"1f1b\"\n", 1));
  EXPECT_NE(msg.find("create: pipeline: schedule = \"1f1b\" needs data.micro_batches >= stages "
                     "(2), but a step has 1 micro-batches"),
            std::string::npos)
      << msg;
  // Both ranks refuse it: the cause is said once, although each rank's
  // message names that rank ("strategy 'pipeline' (rank R): ...").
  EXPECT_EQ(msg.find("failed too"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tessera::test

// Activation checkpointing (the `activation_checkpointing` option every
// strategy takes; docs/strategies/README.md):
//  * every strategy (none, ddp, zero1, zero2, zero3, fsdp, tensor in both
//    modes, pipeline under 1f1b, gpipe and zb1, hybrid) trains gpt (and
//    none, zero3 and sequence-mode tensor llama) with
//    activation_checkpointing = 1 and 2 to the same bits on every rank as
//    without it (every piece of parameters and optimizer state, and the
//    loss), and with 1 its largest rank's tracked activation peak is lower
//    (not above under zb1). With no tensor axis the bytes sent per step stay the same, and fsdp's
//    allgather and reduce-scatter counts too (the recompute uses the
//    parameters gathered for the backward);
//  * the tracked activation peak of `none`, `tensor` and `pipeline` on an
//    8-layer gpt is the estimate's (held contexts + copies + one
//    recomputed context) within 1%, for intervals 0 to 3;
//  * a negative value is refused naming the strategy, the key and the
//    value, a non-integer naming the key and its type.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "estimate_support.hpp"
#include "strategy_support.hpp"

namespace tessera::test {
namespace {

struct CkptCase {
  std::string name;
  std::string strategy;
  int world;
  std::string options;
  int64_t micro_batches;
  std::string model = "gpt";
};

void PrintTo(const CkptCase& c, std::ostream* os) { *os << c.name; }

// Three steps of gpt under `c`, checkpointing every `every` units.
RunSpec ckpt_spec(const CkptCase& c, int every) {
  RunSpec s = spec(c.model, c.strategy, c.world, c.options, c.micro_batches);
  s.steps = 3;
  if (every > 0) s.strategy_options += "\nactivation_checkpointing = " + std::to_string(every);
  return s;
}

int64_t activation_peak(const train::RunResult& r) {
  int64_t most = 0;
  for (const auto& m : r.memory) most = std::max(most, m.peak[TESSERA_MEM_ACTIVATIONS]);
  return most;
}

class Checkpointing : public ::testing::TestWithParam<CkptCase> {};

TEST_P(Checkpointing, SameBitsAsWithoutAndLessActivationMemory) {
  const CkptCase& c = GetParam();
  const train::RunResult& base = cached(ckpt_spec(c, 0));
  ASSERT_EQ(base.final_state.size(), static_cast<size_t>(c.world));
  for (const int every : {1, 2}) {
    const train::RunResult& r = cached(ckpt_spec(c, every));
    ASSERT_EQ(r.last_step, 3);
    ASSERT_EQ(r.final_state.size(), base.final_state.size());
    for (size_t k = 0; k < r.final_state.size(); ++k) {
      EXPECT_EQ(first_piece_difference(r.final_state[k], base.final_state[k]), "")
          << "every " << every << ", rank " << k;
    }
    EXPECT_EQ(r.final_loss, base.final_loss) << "every " << every;
    // The recompute gathers nothing more (zero3, fsdp: it uses the
    // backward's parameters); only a tensor axis repeats the forward's
    // collectives.
    if (c.strategy != "tensor" && c.strategy != "hybrid") {
      ASSERT_FALSE(r.logged.empty());
      EXPECT_EQ(r.logged.back().comm_bytes, base.logged.back().comm_bytes) << "every " << every;
    }
  }
  // zb1 keeps a micro-batch's recomputed contexts from the input half of
  // its backward to the weight half, so its peak may stay.
  if (c.name == "pipeline_zb1") {
    EXPECT_LE(activation_peak(cached(ckpt_spec(c, 1))), activation_peak(base));
  } else {
    EXPECT_LT(activation_peak(cached(ckpt_spec(c, 1))), activation_peak(base));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, Checkpointing,
    ::testing::Values(
        CkptCase{"none", "none", 1, "", 2}, CkptCase{"ddp", "ddp", 2, "", 2},
        CkptCase{"zero1", "zero1", 2, "", 1}, CkptCase{"zero2", "zero2", 2, "", 1},
        CkptCase{"zero3", "zero3", 2, "", 2}, CkptCase{"fsdp", "fsdp", 2, "", 1},
        CkptCase{"fsdp_shard_grad_op", "fsdp", 2, "sharding_strategy = \"shard_grad_op\"", 1},
        CkptCase{"tensor", "tensor", 2, "size = 2", 1},
        CkptCase{"tensor_sequence", "tensor", 2, "size = 2\nmode = \"sequence\"", 2},
        CkptCase{"pipeline_1f1b", "pipeline", 2, "stages = 2", 2},
        CkptCase{"pipeline_gpipe", "pipeline", 2, "stages = 1\nschedule = \"gpipe\"", 2},
        CkptCase{"pipeline_zb1", "pipeline", 2, "stages = 2\nschedule = \"zb1\"", 2},
        CkptCase{"hybrid", "hybrid", 4, "dp = 1\ntp = 2\npp = 2", 2},
        CkptCase{"none_llama", "none", 1, "", 2, "llama"},
        CkptCase{"zero3_llama", "zero3", 2, "", 1, "llama"},
        CkptCase{"tensor_llama", "tensor", 2, "size = 2\nmode = \"sequence\"", 1, "llama"}),
    [](const ::testing::TestParamInfo<CkptCase>& param_info) { return param_info.param.name; });

// fsdp counts the allgathers and reduce-scatters of a step: the same with
// every unit checkpointed.
TEST(CheckpointingCollectives, FsdpGathersNoMore) {
  const CkptCase c{"fsdp", "fsdp", 2, "", 1};
  const Collectives base = step_collectives(ckpt_spec(c, 0), 2);
  const Collectives ckpt = step_collectives(ckpt_spec(c, 1), 2);
  EXPECT_GT(base.allgathers, 0);
  EXPECT_EQ(ckpt.allgathers, base.allgathers);
  EXPECT_EQ(ckpt.reduce_scatters, base.reduce_scatters);
}

// The run's tracked activation peak (largest rank) against the estimate's
// activation category, which follows the formula of
// sdk::parallel_estimate::range_activations.
void expect_peak_follows_formula(const std::string& strategy, int world, const std::string& options,
                                 int64_t micro_batches) {
  std::vector<int64_t> peaks;
  for (const int every : {0, 1, 2, 3}) {
    RunSpec s = estimate_spec(kGpt8, strategy, world, options, micro_batches, 16);
    if (every > 0) s.strategy_options += "\nactivation_checkpointing = " + std::to_string(every);
    const tessera_estimate e = estimate_of(s);
    const int64_t predicted = e.memory[TESSERA_MEM_ACTIVATIONS];
    const int64_t measured = activation_peak(run(s));
    std::printf("%s every %d: activations predicted %lld, measured %lld\n", strategy.c_str(), every,
                static_cast<long long>(predicted), static_cast<long long>(measured));
    EXPECT_NEAR(static_cast<double>(measured), static_cast<double>(predicted),
                0.01 * static_cast<double>(predicted))
        << strategy << " every " << every;
    peaks.push_back(measured);
  }
  // Every checkpointing interval holds less than none; every unit less
  // than every second one.
  for (size_t k = 1; k < peaks.size(); ++k) EXPECT_LT(peaks[k], peaks[0]) << "every " << k;
  EXPECT_LT(peaks[1], peaks[2]);
}

TEST(CheckpointingPeak, NoneFollowsTheFormula) { expect_peak_follows_formula("none", 1, "", 1); }

TEST(CheckpointingPeak, TensorFollowsTheFormula) {
  expect_peak_follows_formula("tensor", 2, "size = 2", 1);
}

TEST(CheckpointingPeak, PipelineFollowsTheFormula) {
  expect_peak_follows_formula("pipeline", 2, "stages = 2\nschedule = \"gpipe\"", 2);
}

TEST(CheckpointingOption, RefusesANegativeOrNonIntegerValueNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> strategies = {
      {"none", ""},
      {"ddp", ""},
      {"zero1", ""},
      {"zero2", ""},
      {"zero3", ""},
      {"fsdp", ""},
      {"tensor", ""},
      {"pipeline", "schedule = \"gpipe\"\n"},
      {"hybrid", "dp = 1\ntp = 2\npp = 1\n"}};
  for (const auto& [strategy, options] : strategies) {
    const int world = strategy == "none" ? 1 : 2;
    RunSpec s = spec("gpt", strategy, world, options + "activation_checkpointing = -2");
    EXPECT_NE(refusal(s).find(strategy + ": option 'activation_checkpointing' = -2 must be >= 0"),
              std::string::npos)
        << strategy << ": " << refusal(s);
    s.strategy_options = options + "activation_checkpointing = 1.5";
    EXPECT_NE(refusal(s).find("option 'activation_checkpointing' (line"), std::string::npos)
        << strategy << ": " << refusal(s);
    EXPECT_NE(refusal(s).find("must be an int, got a float"), std::string::npos)
        << strategy << ": " << refusal(s);
  }
}

}  // namespace
}  // namespace tessera::test

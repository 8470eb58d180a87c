// The estimates of the model-parallel strategies (pipeline, tensor, hybrid)
// against real runs: for the quickstart gpt, an 8-layer gpt and a llama on
// 2 and 4 in-memory ranks, train::estimate_config's memory per rank (the
// largest rank's total peak and its peak per category) within 10% of what
// the run tracked, and its bytes per step (all axes of the busiest rank)
// equal to the logged comm_bytes (the max over ranks). Refusals go through
// the same estimate.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "strategy_support.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/train/selection.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

const char* const kQuickstartGpt =
    "name = \"gpt\"\nlayers = 2\nd_model = 64\nheads = 4\nseq_len = 32\nvocab = 256\n";
const char* const kGpt8 =
    "name = \"gpt\"\nlayers = 8\nd_model = 64\nheads = 4\nseq_len = 32\nvocab = 256\n";
// examples/llama.toml with 2 layers instead of 4.
const char* const kLlama =
    "name = \"llama\"\nvocab = 256\nseq_len = 64\nlayers = 2\nd_model = 64\nheads = 4\n"
    "kv_heads = 2\n";

RunSpec estimate_spec(const char* model, const std::string& strategy, int world,
                      const std::string& options, int64_t micro_batches, int64_t batch = 32) {
  RunSpec s = spec("gpt", strategy, world, options, micro_batches);
  s.model_table = model;
  s.batch = batch;
  s.steps = 2;
  return s;
}

tessera_estimate estimate_of(const RunSpec& s) {
  const Config config = parse_config(config_toml(s), "estimate_test.toml");
  return train::estimate_config(config, registry(), s.world);
}

int64_t sent(const tessera_estimate& e) {
  int64_t bytes = 0;
  for (int32_t a = 0; a < e.num_axes; ++a) bytes += e.axes[a].bytes;
  return bytes;
}

void expect_within(int64_t predicted, int64_t measured, double tolerance, const std::string& what) {
  const double err = measured == 0 ? (predicted == 0 ? 0.0 : 1.0)
                                   : std::abs(static_cast<double>(predicted - measured)) /
                                         static_cast<double>(measured);
  EXPECT_LE(err, tolerance) << what << ": predicted " << predicted << ", measured " << measured;
}

const char* const kCategory[] = {"params", "grads", "optimizer", "comm", "activations", "other"};

// The estimate of `s` against its run: the largest rank's total peak and
// its peaks per category within 10% (parameters, gradients and optimizer
// state exactly), the bytes per step exactly.
void expect_estimate_matches_run(const RunSpec& s) {
  SCOPED_TRACE(s.strategy + " {" + s.strategy_options + "} on " + std::to_string(s.world) +
               " ranks, " + std::to_string(s.micro_batches) + " micro-batches");
  const tessera_estimate e = estimate_of(s);
  const train::RunResult& run = cached(s);
  ASSERT_EQ(run.memory.size(), static_cast<std::size_t>(s.world));
  const auto largest = std::max_element(
      run.memory.begin(), run.memory.end(),
      [](const MemoryStats& a, const MemoryStats& b) { return a.total_peak < b.total_peak; });
  expect_within(e.memory_total, largest->total_peak, 0.10, "total peak per rank");
  for (std::size_t c = 0; c < TESSERA_MEM_CATEGORY_COUNT; ++c) {
    if (c == TESSERA_MEM_COMM) {
      // Sends waiting for their receiver (the in-memory backend's copies):
      // the estimate counts one activation message per boundary; the run
      // holds between none and one per micro-batch, by timing.
      EXPECT_LE(largest->peak[c], e.memory[c] * s.micro_batches) << "comm";
      continue;
    }
    const bool exact =
        c == TESSERA_MEM_PARAMS || c == TESSERA_MEM_GRADS || c == TESSERA_MEM_OPTIMIZER;
    expect_within(e.memory[c], largest->peak[c], exact ? 0.0 : 0.10, kCategory[c]);
  }
  ASSERT_FALSE(run.logged.empty());
  EXPECT_EQ(sent(e), run.logged.back().comm_bytes) << "bytes per step";
  EXPECT_DOUBLE_EQ(e.bubble, run.logged.back().bubble_formula);
}

TEST(EstimateParallel, PipelineQuickstartGpt) {
  expect_estimate_matches_run(
      estimate_spec(kQuickstartGpt, "pipeline", 2, "stages = 2\nschedule = \"gpipe\"", 2));
  expect_estimate_matches_run(
      estimate_spec(kQuickstartGpt, "pipeline", 2, "stages = 2\nschedule = \"1f1b\"", 4));
  expect_estimate_matches_run(
      estimate_spec(kQuickstartGpt, "pipeline", 4, "stages = 2\nschedule = \"1f1b\"", 2));
  expect_estimate_matches_run(
      estimate_spec(kQuickstartGpt, "pipeline", 2, "stages = 2\nschedule = \"interleaved\"", 2));
  expect_estimate_matches_run(
      estimate_spec(kQuickstartGpt, "pipeline", 2, "stages = 2\nschedule = \"zb1\"", 4));
  expect_estimate_matches_run(estimate_spec(
      kQuickstartGpt, "pipeline", 2,
      "stages = 2\nschedule = \"gpipe\"\npartition = \"explicit\"\nboundaries = [1]", 2));
}

TEST(EstimateParallel, TensorQuickstartGpt) {
  expect_estimate_matches_run(estimate_spec(kQuickstartGpt, "tensor", 2, "size = 2", 1));
  expect_estimate_matches_run(
      estimate_spec(kQuickstartGpt, "tensor", 4, "size = 2\nmode = \"sequence\"", 2));
  expect_estimate_matches_run(estimate_spec(kQuickstartGpt, "tensor", 4, "size = 4", 1));
}

TEST(EstimateParallel, HybridQuickstartGpt) {
  expect_estimate_matches_run(
      estimate_spec(kQuickstartGpt, "hybrid", 4, "tp = 2\npp = 2\nschedule = \"1f1b\"", 2));
  expect_estimate_matches_run(
      estimate_spec(kQuickstartGpt, "hybrid", 4, "pp = 2\ndp = 2\ndp_shard = \"zero1\"", 2));
  expect_estimate_matches_run(estimate_spec(
      kQuickstartGpt, "hybrid", 4, "tp = 2\ndp = 2\nmode = \"sequence\"\ndp_shard = \"zero2\"", 1));
}

TEST(EstimateParallel, EightLayerGpt) {
  expect_estimate_matches_run(
      estimate_spec(kGpt8, "pipeline", 4, "stages = 4\nschedule = \"1f1b\"", 4, 16));
  expect_estimate_matches_run(estimate_spec(
      kGpt8, "pipeline", 2, "stages = 2\nschedule = \"interleaved\"\nvirtual_stages = 3", 4, 16));
  expect_estimate_matches_run(estimate_spec(
      kGpt8, "hybrid", 4, "tp = 2\npp = 2\nmode = \"sequence\"\nschedule = \"gpipe\"", 2, 16));
}

TEST(EstimateParallel, Llama) {
  expect_estimate_matches_run(
      estimate_spec(kLlama, "pipeline", 2, "stages = 2\nschedule = \"gpipe\"", 2, 16));
  expect_estimate_matches_run(estimate_spec(kLlama, "tensor", 2, "size = 2", 1, 16));
  expect_estimate_matches_run(
      estimate_spec(kLlama, "hybrid", 4, "tp = 2\ndp = 2\ndp_shard = \"zero1\"", 2, 16));
}

// What the strategies refuse at create or step time, the estimate refuses
// with the same message.
std::string estimate_error(const RunSpec& s) {
  try {
    (void)estimate_of(s);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "the estimate accepted " << s.strategy << " {" << s.strategy_options << "}";
  return "";
}

TEST(EstimateParallel, RefusesWhatTheRunRefuses) {
  const auto refused = [](const RunSpec& s, const std::string& want) {
    EXPECT_NE(estimate_error(s).find(want), std::string::npos) << want;
  };
  refused(estimate_spec(kQuickstartGpt, "pipeline", 8, "stages = 8", 8),
          "pipeline: stages = 8 is more than the model's 4 units");
  refused(estimate_spec(kQuickstartGpt, "pipeline", 2,
                        "stages = 2\nschedule = \"interleaved\"\nvirtual_stages = 3", 2),
          "pipeline: stages x virtual_stages = 2 x 3 = 6 model chunks is more than the model's 4 "
          "units");
  refused(estimate_spec(kQuickstartGpt, "pipeline", 2, "stages = 2\nschedule = \"1f1b\"", 1),
          "pipeline: schedule = \"1f1b\" needs data.micro_batches >= stages (2), but a step has "
          "1 micro-batches");
  refused(estimate_spec(kQuickstartGpt, "hybrid", 4, "pp = 2\nschedule = \"interleaved\"", 3),
          "hybrid: schedule = \"interleaved\" needs data.micro_batches to be a multiple of pp (2)");
  refused(estimate_spec(kQuickstartGpt, "tensor", 4, "size = 3", 1),
          "tensor: size = 3 does not divide the world size 4");
  refused(estimate_spec(kQuickstartGpt, "hybrid", 4, "tp = 3\npp = 1", 1),
          "hybrid: dp x tp x pp = ? x 3 x 1 must be the world size 4");
  // The built model refuses a split it cannot do: llama's 2 key/value heads
  // over 4 ranks.
  refused(estimate_spec(kLlama, "tensor", 4, "size = 4", 1, 16),
          "tensor: [strategy.options] size = 4, mode = \"tensor\" cannot split the model");
  refused(estimate_spec(kLlama, "hybrid", 4, "tp = 4", 1, 16),
          "hybrid: [strategy.options] tp = 4, mode = \"tensor\" cannot split the model");
  // ... and the run refuses it with the same words.
  EXPECT_NE(run_error(estimate_spec(kLlama, "tensor", 4, "size = 4", 1, 16))
                .find("tensor: [strategy.options] size = 4, mode = \"tensor\" cannot split the "
                      "model"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::test

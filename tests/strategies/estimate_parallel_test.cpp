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

#include "estimate_support.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/train/selection.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

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

// Activation checkpointing: fewer contexts per slot (under zb1 the
// recomputed ones between the backward halves), and for a tensor axis the
// recomputed forwards' collectives in the traffic.
TEST(EstimateParallel, Checkpointing) {
  for (const std::string every : {"1", "2"}) {
    const std::string ckpt = "\nactivation_checkpointing = " + every;
    expect_estimate_matches_run(
        estimate_spec(kGpt8, "pipeline", 2, "stages = 2\nschedule = \"1f1b\"" + ckpt, 4, 16));
    expect_estimate_matches_run(
        estimate_spec(kGpt8, "pipeline", 2, "stages = 2\nschedule = \"zb1\"" + ckpt, 4, 16));
    expect_estimate_matches_run(estimate_spec(kGpt8, "tensor", 2, "size = 2" + ckpt, 1, 16));
    expect_estimate_matches_run(
        estimate_spec(kGpt8, "tensor", 2, "size = 2\nmode = \"sequence\"" + ckpt, 2, 16));
    expect_estimate_matches_run(
        estimate_spec(kGpt8, "hybrid", 4, "tp = 2\npp = 2\nschedule = \"1f1b\"" + ckpt, 2, 16));
  }
}

TEST(EstimateParallel, Llama) {
  expect_estimate_matches_run(
      estimate_spec(kLlama2, "pipeline", 2, "stages = 2\nschedule = \"gpipe\"", 2, 16));
  expect_estimate_matches_run(estimate_spec(kLlama2, "tensor", 2, "size = 2", 1, 16));
  expect_estimate_matches_run(
      estimate_spec(kLlama2, "hybrid", 4, "tp = 2\ndp = 2\ndp_shard = \"zero1\"", 2, 16));
}

// What the strategies refuse at create or step time, the estimate refuses
// with the same message.
TEST(EstimateParallel, RefusesWhatTheRunRefuses) {
  const auto refused = [](const RunSpec& s, const std::string& want) {
    EXPECT_NE(estimate_refusal(s).find(want), std::string::npos) << want;
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
  refused(estimate_spec(kLlama2, "tensor", 4, "size = 4", 1, 16),
          "tensor: [strategy.options] size = 4, mode = \"tensor\" cannot split the model");
  refused(estimate_spec(kLlama2, "hybrid", 4, "tp = 4", 1, 16),
          "hybrid: [strategy.options] tp = 4, mode = \"tensor\" cannot split the model");
  // ... and the run refuses it with the same words.
  EXPECT_NE(run_error(estimate_spec(kLlama2, "tensor", 4, "size = 4", 1, 16))
                .find("tensor: [strategy.options] size = 4, mode = \"tensor\" cannot split the "
                      "model"),
            std::string::npos);
}

// With [compression], every strategy's estimate refuses a compressor
// exactly where its create does (strategy 2.8), so a selector never chooses
// a strategy that would refuse the run's compressor: fp16 (summable), topk
// (gather) and powersgd (collective), under each strategy that estimates.
TEST(EstimateParallel, RefusesTheCompressorsTheRunRefuses) {
  struct Case {
    const char* strategy;
    int world;
    const char* options;
    int64_t micro_batches;
  };
  const Case cases[] = {{"none", 1, "", 1},
                        {"ddp", 2, "", 1},
                        {"zero1", 2, "", 1},
                        {"zero2", 2, "", 1},
                        {"zero3", 2, "", 1},
                        {"fsdp", 2, "", 1},
                        {"pipeline", 2, "stages = 2\nschedule = \"gpipe\"", 2},
                        {"tensor", 2, "size = 2", 1},
                        {"hybrid", 2, "pp = 2\nschedule = \"gpipe\"", 2}};
  for (const Case& c : cases) {
    for (const char* compressor : {"fp16", "topk", "powersgd"}) {
      SCOPED_TRACE(std::string(c.strategy) + " with " + compressor);
      RunSpec s = estimate_spec(kQuickstartGpt, c.strategy, c.world, c.options, c.micro_batches);
      s.steps = 1;
      s.extra_toml = std::string("[compression]\nname = \"") + compressor + "\"\n";
      std::string estimate;
      try {
        (void)estimate_of(s);
      } catch (const Error& e) {
        estimate = e.what();
      }
      const std::string run = run_error(s);
      EXPECT_EQ(estimate.empty(), run.empty()) << "estimate: " << estimate << "\nrun: " << run;
    }
  }
  RunSpec tensor = estimate_spec(kQuickstartGpt, "tensor", 2, "size = 2", 1);
  tensor.extra_toml = "[compression]\nname = \"topk\"\n";
  EXPECT_NE(estimate_refusal(tensor).find("this strategy takes no gradient compressor"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::test

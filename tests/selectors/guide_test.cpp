// The selection guide's rows: transformer descriptions of the guide's sizes
// with 80 GB per rank, estimated by the real strategy plugins. Each must
// choose the guide's recommendation, or state in the chosen row's reason
// why not (a documented deviation). Skipped while a strategy of the build
// tree has no estimate.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>

#include "select_support.hpp"
#include "tessera/core/train/selection.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

constexpr int64_t kBudget = 80'000'000'000;  // 80 GB per rank

struct GuideCase {
  const char* label;
  int64_t layers, d, heads;
  int32_t world, ranks_per_node;
  // Strategies whose choice is the guide's recommendation for the row.
  std::vector<std::string> recommended;
  // Micro-batches per rank and step (a pipeline needs one per stage).
  int64_t micro_batches = 1;
};

std::string strategies_without_estimate() {
  std::string missing;
  for (const std::string& n : registry().names(TESSERA_KIND_STRATEGY)) {
    const train::StrategyPlugin p(registry(), n, nullptr, "guide test");
    if (!p.can_estimate()) missing += (missing.empty() ? "" : ", ") + n;
  }
  return missing;
}

// The guide's setting: 512-token sequences, 8 per rank and step (in one
// micro-batch, or in 64 micro-batches of the global batch for the largest
// model, as pipelines train it), trained the way models of these sizes are on 80 GB GPUs:
// with activation checkpointing in 16-bit (each block keeps only its input,
// 2·s·d bytes per example, split over a tensor group in sequence mode, and
// recomputes its forward in backward) and 16 bytes of state per parameter
// (f32 AdamW here; 2 + 2 + 12 with mixed precision, the same total).
train::ModelDescription guide_model(const GuideCase& c) {
  constexpr int64_t kSeq = 512;
  const train::ModelDescription full =
      transformer(c.label, c.layers, c.d, c.heads, 50257, kSeq,
                  train::BatchSpec{8 * static_cast<int64_t>(c.world), 1, 2});
  std::vector<train::UnitSpec> units = full.units();
  for (train::UnitSpec& u : units) {
    if (u.name.rfind("block", 0) != 0) continue;
    u.activation_bytes = 2.0 * static_cast<double>(kSeq * c.d);
    u.split_activation_bytes = 0;
    u.sequence_activation_bytes = u.activation_bytes;
    u.backward_flops += u.forward_flops;
  }
  return {c.label, std::move(units), kSeq,
          train::BatchSpec{full.c().global_batch, c.micro_batches, 2}};
}

class GuideRows : public ::testing::TestWithParam<GuideCase> {};

TEST_P(GuideRows, ChooseTheGuidesRecommendationOrSayWhyNot) {
  const std::string missing = strategies_without_estimate();
  if (!missing.empty()) GTEST_SKIP() << "strategies without an estimate yet: " << missing;
  const GuideCase& c = GetParam();
  const train::ModelDescription model = guide_model(c);
  // Through the host's own selection path (the estimate callback runs
  // each candidate's real plugin), on an assumed GPU backend: 100 GB/s
  // within a node, 20 us per collective.
  train::SelectRequest request;
  request.registry = &registry();
  request.model = &model;
  request.world_size = c.world;
  request.ranks_per_node = c.ranks_per_node;
  request.budget = {kBudget, "80 GB per GPU"};
  request.backend = [] {
    train::BackendProps p;
    p.name = "gpu";
    p.device = TESSERA_DEVICE_CUDA;
    p.thread_ranks = false;
    p.bandwidth = 100e9;
    p.latency = 20e-6;
    p.source = "assumed GPU links";
    return p;
  };
  request.no_trial_reason = "no trials in the guide tests";
  const train::Selection sel = train::run_selector(request);
  const train::SelectionRow& chosen = sel.choice();
  std::string table;
  for (std::size_t i = 0; i < sel.rows.size(); ++i) {
    table +=
        (i == sel.chosen ? "* " : "  ") + sel.rows[i].label() + ": " + sel.rows[i].reason + "\n";
  }
  const bool recommended =
      std::find(c.recommended.begin(), c.recommended.end(), chosen.strategy) != c.recommended.end();
  if (!recommended) {
    EXPECT_NE(chosen.reason.find("the guide recommends"), std::string::npos) << table;
  }
  std::cout << c.label << " on " << c.world << " ranks:\n" << table;
}

// Sizes: 12·d² per block plus a 50257-token embedding tied to the head.
INSTANTIATE_TEST_SUITE_P(
    Guide, GuideRows,
    ::testing::Values(
        GuideCase{"gpt_350m_1", 24, 1024, 16, 1, 1, {"none", "ddp"}},
        GuideCase{"gpt_350m_4", 24, 1024, 16, 4, 4, {"ddp"}},
        GuideCase{"gpt_3b_2", 32, 2560, 32, 2, 2, {"ddp", "zero1", "zero2", "fsdp"}},
        GuideCase{"gpt_3b_8", 32, 2560, 32, 8, 8, {"ddp", "zero1", "zero2", "fsdp"}},
        GuideCase{"gpt_10b_4", 48, 4096, 32, 4, 4, {"fsdp", "zero3"}},
        GuideCase{"gpt_10b_8", 48, 4096, 32, 8, 8, {"fsdp", "zero3"}},
        GuideCase{"gpt_20b_8", 44, 6144, 48, 8, 8, {"zero3", "fsdp"}},
        GuideCase{"gpt_30b_16", 60, 6656, 52, 16, 8, {"zero3", "fsdp"}},
        GuideCase{"gpt_175b_64", 96, 12288, 96, 64, 8, {"hybrid", "pipeline", "tensor"}, 64}),
    [](const auto& p) { return std::string(p.param.label); });

}  // namespace
}  // namespace tessera::test

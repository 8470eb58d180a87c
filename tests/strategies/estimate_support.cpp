#include "estimate_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "tessera/core/config.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/train/selection.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {

const char* const kQuickstartGpt =
    "name = \"gpt\"\nlayers = 2\nd_model = 64\nheads = 4\nseq_len = 32\nvocab = 256\n";
const char* const kGpt8 =
    "name = \"gpt\"\nlayers = 8\nd_model = 64\nheads = 4\nseq_len = 32\nvocab = 256\n";
const char* const kLlama2 =
    "name = \"llama\"\nvocab = 256\nseq_len = 64\nlayers = 2\nd_model = 64\nheads = 4\n"
    "kv_heads = 2\n";

RunSpec estimate_spec(const char* model, const std::string& strategy, int world,
                      const std::string& options, int64_t micro_batches, int64_t batch) {
  RunSpec s = spec("gpt", strategy, world, options, micro_batches);
  s.model_table = model;
  s.batch = batch;
  s.steps = 2;
  return s;
}

tessera_estimate estimate_of(const RunSpec& s) {
  const Config config = parse_config(config_toml(s), "estimate.toml");
  return train::estimate_config(config, registry(), s.world);
}

int64_t sent_bytes(const tessera_estimate& e) {
  int64_t bytes = 0;
  for (int32_t a = 0; a < e.num_axes; ++a) bytes += e.axes[a].bytes;
  return bytes;
}

namespace {

void expect_within(int64_t predicted, int64_t measured, double tolerance, const char* what) {
  const double err = measured == 0 ? (predicted == 0 ? 0.0 : 1.0)
                                   : std::abs(static_cast<double>(predicted - measured)) /
                                         static_cast<double>(measured);
  EXPECT_LE(err, tolerance) << what << ": predicted " << predicted << ", measured " << measured;
}

bool has_pipeline_axis(const tessera_estimate& e) {
  for (int32_t a = 0; a < e.num_axes; ++a) {
    if (e.axes[a].name != nullptr && std::strcmp(e.axes[a].name, "pipeline") == 0) return true;
  }
  return false;
}

}  // namespace

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
  for (int c = 0; c < TESSERA_MEM_CATEGORY_COUNT; ++c) {
    const char* name = MemoryTracker::category_name(c);
    const auto measured = largest->peak[static_cast<std::size_t>(c)];
    if (c == TESSERA_MEM_COMM && has_pipeline_axis(e)) {
      EXPECT_LE(measured, e.memory[c] * s.micro_batches) << name;
      continue;
    }
    const bool exact =
        c == TESSERA_MEM_PARAMS || c == TESSERA_MEM_GRADS || c == TESSERA_MEM_OPTIMIZER;
    expect_within(e.memory[c], measured, exact ? 0.0 : 0.10, name);
  }
  ASSERT_FALSE(run.logged.empty());
  EXPECT_EQ(sent_bytes(e), run.logged.back().comm_bytes) << "bytes per step";
  EXPECT_DOUBLE_EQ(e.bubble, run.logged.back().bubble_formula);
  std::printf("%-8s %d %-48s m%lld | act %lld/%lld comm %lld/%lld total %lld/%lld sent %lld/%lld\n",
              s.strategy.c_str(), s.world, s.strategy_options.c_str(),
              static_cast<long long>(s.micro_batches),
              static_cast<long long>(e.memory[TESSERA_MEM_ACTIVATIONS]),
              static_cast<long long>(largest->peak[TESSERA_MEM_ACTIVATIONS]),
              static_cast<long long>(e.memory[TESSERA_MEM_COMM]),
              static_cast<long long>(largest->peak[TESSERA_MEM_COMM]),
              static_cast<long long>(e.memory_total), static_cast<long long>(largest->total_peak),
              static_cast<long long>(sent_bytes(e)),
              static_cast<long long>(run.logged.back().comm_bytes));
}

std::string estimate_refusal(const RunSpec& s) {
  try {
    (void)estimate_of(s);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "the estimate accepted " << s.strategy << " {" << s.strategy_options << "}";
  return "";
}

}  // namespace tessera::test

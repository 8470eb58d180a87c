// Runs a selector plugin through its C ABI with a hand-made
// tessera_select_env: installed strategies from the build tree's plugins,
// estimates and trials from test callbacks, rows copied as reported.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/c/selector.h"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/core/train/model_description.hpp"

namespace tessera::test {

// The registry over the build tree's plugin directory (scanned once).
const PluginRegistry& registry();

struct Row {
  std::string strategy;
  std::string options;
  uint32_t flags = 0;
  tessera_estimate estimate{};
  double step_seconds = -1;
  double compute_seconds = 0;
  double comm_seconds = 0;
  double bubble_seconds = 0;
  double measured_seconds = 0;
  std::string reason;
  [[nodiscard]] bool chosen() const { return (flags & TESSERA_ROW_CHOSEN) != 0; }
  [[nodiscard]] bool fits() const { return (flags & TESSERA_ROW_FITS) != 0; }
  [[nodiscard]] std::string name() const {
    return options.empty() ? strategy : strategy + " (" + options + ")";
  }
};

// Estimate callback: fills `out` and returns OK, or returns a status with
// the reason in *why.
using EstimateFn =
    std::function<tessera_status(const std::string& strategy, const std::string& options,
                                 tessera_estimate* out, std::string* why)>;
using TrialFn =
    std::function<tessera_status(const std::string& strategy, const std::string& options,
                                 int64_t steps, double* seconds, int64_t* peak, std::string* why)>;

struct SelectSetup {
  int32_t world = 1;
  int32_t ranks_per_node = 1;
  int64_t budget = 0;
  std::string budget_source = "test";
  const train::ModelDescription* model = nullptr;
  // Installed strategies (from the registry); empty: all in the build tree.
  std::vector<std::string> strategies;
  // Strategies reported as unable to estimate (can_estimate 0).
  std::vector<std::string> without_estimate;
  EstimateFn estimate;
  TrialFn trial;  // null: UNSUPPORTED "ranks are processes"
  tessera_backend_props props{};
};

struct SelectResult {
  tessera_status status = TESSERA_OK;
  std::string error;
  std::vector<Row> rows;
  std::vector<std::string> estimated;  // "strategy|options" in call order
  // The chosen row, the row of a candidate (both throw when there is none)
  // and whether a candidate was reported.
  [[nodiscard]] const Row& chosen() const;
  [[nodiscard]] const Row& find(const std::string& strategy, const std::string& options) const;
  [[nodiscard]] bool has(const std::string& strategy, const std::string& options) const;
};

// Default backend properties: CPU, thread ranks, 1 GB/s, 10 us, assumed.
tessera_backend_props cpu_props();

// Runs selector `selector` with options `options_toml` ("noise = 0.2").
SelectResult run_select(const SelectSetup& setup, const std::string& options_toml = "",
                        const std::string& selector = "auto");

// A description of a GPT-like transformer: embedding, `layers` blocks of
// width `d` with `heads` heads, head tied to the embedding, vocabulary
// `vocab`, sequences of `seq` tokens, f32.
train::ModelDescription transformer(const std::string& name, int64_t layers, int64_t d,
                                    int64_t heads, int64_t vocab, int64_t seq,
                                    const train::BatchSpec& batch);

// An estimate with `total` bytes (all params), `flops` compute and one
// "data" axis of `bytes` over `group` ranks.
tessera_estimate make_estimate(int64_t total, double flops, int64_t bytes, int32_t group,
                               double bubble = 0.0);

}  // namespace tessera::test

// Helpers of the strategy tests: a small training run described in a few
// fields, turned into TOML, run through run_training() on the in-memory
// backend with the plugins of the build tree, and comparisons of the final
// states the ranks wrote.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/plugin_registry.hpp"
#include "tessera/core/train/trainer.hpp"

namespace tessera::test {

// One run. `model` is "mlp", "gpt" or "llama" (the tiny shapes of
// model_toml).
// TESSERA_TEST_THREADS_PER_RANK as a count >= 1; 1 when unset or invalid.
int threads_per_rank_from_env();

struct RunSpec {
  std::string model = "mlp";
  std::string strategy = "ddp";
  int world = 1;
  int64_t steps = 20;
  int64_t batch = 12;
  int64_t micro_batches = 1;
  std::string optimizer = "adamw";
  double grad_clip = 1.0;
  double lr = 0.003;
  // Adam's denominator term. Not the usual 1e-8: the attention key bias of
  // gpt has an exactly zero true gradient (softmax ignores a shift shared by
  // all keys), so its computed gradient is rounding noise (~1e-11), and with
  // eps 1e-8 Adam turns that noise into steps of about lr * 1e-3 whose sign
  // depends on the order of float additions. Any change of that order
  // (ranks, micro-batches) then moves those parameters by ~1e-4 of the
  // tensor's scale in 20 steps. With 1e-5 the noise stays far below eps
  // and the comparison measures the strategy, not Adam's noise gain.
  double eps = 1e-5;
  // run.threads_per_rank of every run, the reference's included: 1, or
  // TESSERA_TEST_THREADS_PER_RANK (ctest runs the equivalence suites again
  // at 2, see CMakeLists.txt).
  int threads_per_rank = threads_per_rank_from_env();
  std::string model_table;       // the [model] table's lines; empty: model_toml(model)
  std::string strategy_options;  // TOML lines of [strategy.options]
  std::string extra_toml;        // more tables appended as is (e.g. [checkpoint])
  double timeout_s = 60;         // [backend] timeout_s
};

// The [model] table of the tiny test models (gpt with a tied head, llama
// with grouped-query attention).
std::string model_toml(const std::string& model);
// The whole configuration text of `spec`.
std::string config_toml(const RunSpec& spec);

// The registry over the build tree's plugin directory (scanned once).
const PluginRegistry& registry();

// Parses and runs `spec`, collecting every rank's final state (all
// replicas). Log lines go to a string, not the console.
train::RunResult run(const RunSpec& spec);

// The parameter tensors ("<unit>.<param>", not "optim.") of a state, sorted.
std::vector<std::string> param_names(const train::CollectedState& state);
// Every tensor name of a state, sorted.
std::vector<std::string> tensor_names(const train::CollectedState& state);

// The ranks' final states of `result` merged into one (each rank wrote its
// own optimizer pieces; replicated tensors are taken once).
train::CollectedState merged(const train::RunResult& result);

// max |a - b| / max |b| over one tensor (max |a - b| when b is all zero).
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b);

// Largest max_rel_diff over the parameter tensors of `state` against
// `reference`; `worst` receives the tensor it occurred in. Throws when a
// tensor of the reference is missing.
double max_param_rel_diff(const train::CollectedState& state,
                          const train::CollectedState& reference, std::string* worst = nullptr);

// Empty when every tensor of `a` and `b` (parameters and optimizer state)
// holds the same bits; otherwise names the first that differs.
std::string first_bit_difference(const train::CollectedState& a, const train::CollectedState& b);

// Empty when every tensor piece of `a` holds the bits of the same piece of
// `b` (ranks holding the same shards, e.g. one place in a tensor group of
// two replicas); otherwise names the first tensor that differs.
std::string first_piece_difference(const train::CollectedState& a, const train::CollectedState& b);

}  // namespace tessera::test

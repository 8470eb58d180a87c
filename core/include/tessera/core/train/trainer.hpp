// The training run behind `tessera train`: resolves the configuration into
// plugins, starts the ranks (threads for a thread-rank backend, this process
// as one rank otherwise), and runs the step loop with logging, metrics and
// checkpoints.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "tessera/core/config.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/core/train/strategy_host.hpp"

namespace tessera::train {

// The plugin file serving each role of a run, for --dry-run and the log.
struct RunPlan {
  std::string backend;
  std::filesystem::path backend_file;
  std::string strategy;
  std::filesystem::path strategy_file;
  std::string model;          // built-in models: "built-in"
  int world_size = 1;
  bool thread_ranks = true;   // ranks are threads of this process
  int64_t parameters = 0;     // distinct parameter elements of the model
  std::string data;           // the dataset's describe()
};

// Checks everything that can be checked before a rank starts: the backend
// and strategy exist (errors list the available ones), their options are
// valid, the strategy accepts world_size, the model and data build, the
// global batch covers every data-parallel rank, model.init exists.
RunPlan plan_run(const Config& config, const PluginRegistry& registry);

// What one log step reports (averaged over the steps since the last log).
struct StepMetrics {
  int64_t step = 0;
  double loss = 0;            // global mean loss of the last step
  double grad_norm = 0;
  double lr = 0;
  double step_seconds = 0;    // wall time per step (slowest rank)
  double comm_wait_share = 0; // blocked-on-communication time / step time (max over ranks)
  double samples_per_second = 0;
  double tokens_per_second = 0;  // sequence models; 0 otherwise
  int64_t comm_bytes = 0;        // bytes sent per step, max over ranks
  std::vector<MemoryStats> memory;  // per rank
};

struct RunOptions {
  std::ostream* out = nullptr;     // log lines and summary; nullptr: the logger
  bool progress = false;           // draw a progress bar on stderr (a terminal)
  // Tests: after the last step, every rank's state with all replicas
  // (StrategyInstance::save(true)), in rank order.
  bool collect_final_state = false;
};

struct RunResult {
  int64_t first_step = 1;        // > 1 after a resume
  int64_t last_step = 0;
  double final_loss = 0;
  std::vector<StepMetrics> logged;
  std::vector<CollectedState> final_state;  // see RunOptions
  std::filesystem::path last_checkpoint;    // empty if none written
};

// Runs the whole training. Throws tessera::Error naming the rank and the
// cause when a rank fails (all others are released through abort).
RunResult run_training(const Config& config, const PluginRegistry& registry,
                       const RunOptions& options = {});

}  // namespace tessera::train

// Strategy selection: the estimate of a configuration's strategy, the inputs
// a selector sees (memory budget, backend properties), and the selector run
// behind `[strategy] name = "auto"` and `tessera select`
// (docs/strategies/auto.md).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "tessera/c/selector.h"
#include "tessera/c/strategy.h"
#include "tessera/core/comm.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/core/optim/optimizer.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/core/train/model_description.hpp"

namespace tessera::train {

// The strategy name that asks a selector to choose.
inline constexpr const char* kAutoStrategy = "auto";
// The selector used unless strategy.options.selector names another.
inline constexpr const char* kDefaultSelector = "auto";

// Refuses a batch `strategy` cannot feed on `world` ranks: its
// `data_size` data-parallel slices times data.micro_batches need at least
// as many examples in data.batch_size. The message names both keys and
// the smallest batch that works.
void check_batch_feeds(int64_t batch_size, int64_t micro_batches, int32_t data_size,
                       const std::string& strategy, int world);

class StrategyPlugin;

// `strategy`'s estimate for `model` on `world_size` ranks (the arguments of
// StrategyPlugin::estimate), then check_batch_feeds for the model's batch:
// what the strategy's start would refuse, refused as it would be. What a
// selector's estimate and `--dry-run` ask.
tessera_estimate estimate_fed(const StrategyPlugin& strategy, const ModelDescription& model,
                              int world_size, int ranks_per_node, int32_t compression);

// tessera_estimate_args.compression for `compression` ([compression] of a
// config): 0 without one, else 1 + the kind of the compressor its plugin
// makes with its options.
int32_t compression_code(const std::optional<PluginChoice>& compression,
                         const PluginRegistry& registry);

// The batch of `config` as a description sees it: data.batch_size,
// data.micro_batches and the optimizer's state slots.
BatchSpec batch_spec(const Config& config);

// The estimate of `config`'s strategy (with its [strategy.options]) for its
// model on `world_size` ranks, `ranks_per_node` to a node (0: all on one).
// Throws what StrategyPlugin::estimate throws, and the model's and the
// optimizer's own errors.
tessera_estimate estimate_config(const Config& config, const PluginRegistry& registry,
                                 int world_size, int ranks_per_node = 0);

// The memory a rank may use, and where the number came from.
struct MemoryBudget {
  int64_t bytes = 0;
  std::string source;  // "run.memory_per_rank", "cgroup limit 8.00 GiB / 4 local ranks", ...
};

// The memory this process may take: the cgroup's memory limit (v2
// memory.max, v1 memory.limit_in_bytes) when it is below the memory
// available now (MemAvailable), else that; bytes 0 when neither is known.
// The source reads "cgroup memory limit 8.00 GiB" or "available memory ...".
MemoryBudget available_memory();

// run.memory_per_rank when set; else the cgroup's memory limit (v2
// memory.max, v1 memory.limit_in_bytes) when it is below the memory
// available now (MemAvailable), else that, divided by `local_ranks`.
MemoryBudget memory_budget(const Config& config, int local_ranks);

// What a selector learns of the backend (tessera_backend_props, owning its
// strings).
struct BackendProps {
  std::string name;
  tessera_device_type device = TESSERA_DEVICE_CPU;
  bool thread_ranks = true;
  bool probed = false;
  double bandwidth = 0;  // bytes per second (allreduce bus bandwidth)
  double latency = 0;    // seconds per small allreduce
  std::string source;
};

// Measures allreduce latency (a 4-byte allreduce) and bus bandwidth (a
// 4 MiB one) over `comm`: a collective, every rank calls it; each rank
// returns its own timing.
BackendProps probe_comm(Communicator& comm);
// Opens `config`'s backend, which must run ranks as threads, with
// `world_size` rank threads and probes it; rank 0's measurement.
BackendProps probe_thread_backend(const Config& config, const PluginRegistry& registry,
                                  int world_size);
// Values assumed without a probe (a world of one rank, or `tessera select`
// for a process backend), with `why` in the source.
BackendProps assumed_backend(const std::string& name, bool thread_ranks, const std::string& why);

// The FLOP rate of the model's own units on one thread.
struct ModelRate {
  double flops_per_second = 0;
  double update_seconds_per_element = 0;  // optimizer update and gradient zeroing
  std::string source;
};

// Times forward and backward of one micro-batch of `examples` examples
// (zero tokens or features) through `model`'s units on this thread, after a
// warm-up run (best of two when a run takes under a second), and divides
// the description's FLOPs by it; and times `optimizer`'s update of all the
// model's parameters with the zeroing of their gradients (best of three),
// per element. Throws Error(UNSUPPORTED) when the parameters, gradients,
// optimizer state and saved activations would take more than `limit_bytes`.
ModelRate measure_model_rate(const model::Model& model, const ModelDescription& desc,
                             const Optimizer& optimizer, int64_t examples,
                             int64_t limit_bytes = int64_t{1} << 31);

// One row of a selector's ranking (tessera_selection_row, owning its
// strings).
struct SelectionRow {
  std::string strategy;
  std::string options;  // "key = value, ..." ("" for the defaults)
  uint32_t flags = 0;   // TESSERA_ROW_*
  tessera_estimate estimate{};
  double step_seconds = -1;
  double compute_seconds = 0;
  double comm_seconds = 0;
  double bubble_seconds = 0;
  double measured_seconds = -1;
  std::string reason;

  [[nodiscard]] bool has(uint32_t flag) const noexcept { return (flags & flag) != 0; }
  // "zero2", or "pipeline {stages = 2, schedule = \"1f1b\"}".
  [[nodiscard]] std::string label() const;
};

struct Selection {
  std::string selector;       // the selector plugin's name
  std::string selector_file;  // its library
  int world_size = 1;
  int ranks_per_node = 1;
  MemoryBudget budget;
  std::optional<BackendProps> backend;    // when the selector asked for it
  std::optional<ModelRate> compute_rate;  // likewise
  std::vector<SelectionRow> rows;         // best first
  std::size_t chosen = 0;                 // index into rows

  [[nodiscard]] const SelectionRow& choice() const { return rows.at(chosen); }
};

// A trial: `steps` steps of the run under a candidate; the mean step time
// of the steps after the first and the peak tracked bytes of the largest
// rank.
struct TrialResult {
  double seconds_per_step = 0;
  int64_t peak_bytes = 0;
};
using TrialRunner = std::function<TrialResult(const std::string& strategy,
                                              const toml::table& options, int64_t steps)>;

struct SelectRequest {
  const PluginRegistry* registry = nullptr;
  const ModelDescription* model = nullptr;
  int world_size = 1;
  int ranks_per_node = 1;
  MemoryBudget budget;
  // The backend's properties, asked for at most once (e.g. a probe).
  std::function<BackendProps()> backend;
  // The model's measured rate, asked for at most once; empty: none (the
  // selector falls back on its own).
  std::function<ModelRate()> compute_rate;
  // Empty when trials cannot run here; `no_trial_reason` says why.
  TrialRunner trial;
  std::string no_trial_reason;
  // The selector plugin and its options: a table (not owned; null: none)
  // whose key `selector`, if any, is not one of them.
  std::string selector = kDefaultSelector;
  const toml::table* options = nullptr;
  std::string options_where;  // "run.toml: [strategy.options]"
  // The run's [compression], whose kind the candidates' estimates are told
  // (a strategy refuses a compressor its create would refuse).
  std::optional<PluginChoice> compression;
};

// The selector and its options a configuration asks for: with
// strategy.name "auto", strategy.options.selector (a string; default
// "auto") and the other [strategy.options] keys (the config's own table,
// so that its lines and overrides are named; `config` must outlive the
// request); otherwise the default selector with no options. Throws
// tessera::Error (invalid argument) when strategy.options.selector is not a
// string.
void selector_from_config(const Config& config, SelectRequest& request);

// A SelectRequest's compute_rate for `model` under `config`: one
// micro-batch of a data-parallel rank of `world_size` ranks.
std::function<ModelRate()> model_rate_probe(const model::Model& model, const ModelDescription& desc,
                                            const Optimizer& optimizer, int world_size);

// Runs the selector. Throws tessera::Error: an unknown selector (listing the
// installed ones), options it does not declare, its own refusal (e.g.
// nothing fits the budget: its message lists each candidate's need), and a
// ranking without exactly one chosen row of an installed strategy.
Selection run_selector(const SelectRequest& request);

// Trials for `config` when its backend runs ranks as threads: the run with
// the candidate's strategy, `steps` steps, no checkpoints, metrics or
// output.
TrialRunner thread_trial_runner(const Config& config, const PluginRegistry& registry);

// Why a selector cannot run trials on `backend`, whose ranks are processes
// (SelectRequest::no_trial_reason).
std::string no_trials_reason(const std::string& backend);

// Parses a candidate's options text ("stages = 2, schedule = \"1f1b\"").
// Throws tessera::Error (invalid argument) naming `where` when it is not
// TOML key = value pairs.
toml::table candidate_options(const std::string& text, const std::string& where);

// The log lines of a selection: the choice with its options and reason,
// then one line per other candidate with its reason.
std::vector<std::string> selection_lines(const Selection& selection);

// The local ranks of this process's node for a process backend:
// LOCAL_WORLD_SIZE (tessera launch, torchrun), OMPI_COMM_WORLD_LOCAL_SIZE
// (Open MPI), else 1.
int local_world_size_from_env();

}  // namespace tessera::train

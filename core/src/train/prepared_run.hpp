// Private to the run loop: everything plan_run builds while checking a
// configuration, kept so run_training does not build it twice, and the
// per-rank part of the run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/comm.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/core/optim/lr_schedule.hpp"
#include "tessera/core/optim/optimizer.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/core/train/checkpointing.hpp"
#include "tessera/core/train/compressor_host.hpp"
#include "tessera/core/train/run_log.hpp"
#include "tessera/core/train/selection.hpp"
#include "tessera/core/train/state_transfer.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "tessera/core/train/trainer.hpp"

namespace tessera::train::detail {

// The checked configuration, resolved into objects every rank shares
// (models, datasets and optimizers are immutable and thread-safe).
struct PreparedRun {
  RunPlan plan;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<Dataset> dataset;
  std::unique_ptr<Optimizer> optimizer;
  std::optional<LrSchedule> schedule;  // absent when run.steps is 0
  // Null while strategy "auto" waits for process ranks to connect
  // (select_on_ranks).
  std::unique_ptr<StrategyPlugin> strategy;
  std::unique_ptr<CompressorPlugin> compressor;  // [compression]; nullptr: none
  std::optional<CheckpointInfo> resume;
  // strategy "auto": the selector's ranking (rank 0's with process ranks).
  std::optional<Selection> selection;
};

// Resolves strategy "auto" for `run`: the selection's choice becomes the
// run's strategy (plan.strategy, plan.strategy_file, plan.strategy_options).
void adopt_choice(const PluginRegistry& registry, const Selection& selection, PreparedRun& run);

// Strategy "auto" with process ranks, once connected (collective over
// `comm`): every rank probes the backend, rank 0 runs the selector and
// broadcasts its choice, and every rank adopts it. Rank 0 keeps the
// selection for the log.
void select_on_ranks(const Config& config, const PluginRegistry& registry, Communicator& comm,
                     PreparedRun& run);

// plan_run's work; same failures.
PreparedRun prepare_run(const Config& config, const PluginRegistry& registry);

// What one rank needs besides its communicator.
struct RankShared {
  const Config* config = nullptr;
  const PreparedRun* run = nullptr;
  StateGather* gather = nullptr;
  std::vector<std::string> tensor_order;  // checkpoint_tensor_order
  std::string fingerprint;                // run_fingerprint: what the ranks must agree on
  bool collect_final_state = false;
  double gemm_rate = 0;  // this rank's sgemm FLOP/s (measure_gemm_rate); 0: not measured
  // Process ranks: opens this process's log when it becomes rank 0 of a
  // world its strategy re-formed after rank 0 was lost (elastic); empty
  // where no such thing can happen.
  std::function<RunLog*()> open_log;
  // RunOptions::joining: the first step must admit this rank into the
  // running world (the strategy reports the world changed).
  bool joining = false;
};

// What one rank hands back. Every rank has the reduced metrics; the
// checkpoint path is rank 0's.
struct RankOutput {
  // The rank's number in its errors: its world rank, or on a rank that
  // joined a running world its rank in the world it joined (run_rank sets
  // it when it is admitted).
  int rank = 0;
  std::vector<StepMetrics> logged;
  int64_t last_step = 0;
  int world_size = 0;  // of the world the rank ended on (smaller after losses: elastic)
  double final_loss = 0;
  double final_loss_mean = 0;      // of the last log line's steps
  int64_t final_window_steps = 0;  // how many
  double mean_step_seconds = 0;
  std::vector<double> rank_step_seconds;  // per rank of the world it ended on
  double comm_wait_share = 0;
  double gemm_rate = 0;  // mean over ranks
  double model_flops_per_second = 0;
  double mfu = 0;
  std::vector<MemoryStats> memory;
  std::filesystem::path last_checkpoint;
  std::optional<CollectedState> final_state;
};

// One rank's whole run over `comm` (its world communicator): strategy,
// initial state, steps, log reductions, checkpoints, summary. `log` is the
// reporter of rank 0 (nullptr on the other ranks). Collective: every rank of
// `comm` calls it. Throws what fails (the caller adds the rank).
void run_rank(const RankShared& shared, Communicator& comm, RunLog* log, RankOutput& out);

// The lines that open a run's log: model, data, strategy, ranks, batch,
// where the weights come from.
std::vector<std::string> describe_run(const PreparedRun& run, const Config& config);

}  // namespace tessera::train::detail

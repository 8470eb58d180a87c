// The training run behind `tessera train`: resolves the configuration into
// plugins, starts the ranks (threads for a thread-rank backend, this process
// as one rank otherwise), and runs the step loop with logging, metrics and
// checkpoints. docs/training.md describes the run as a user sees it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "tessera/core/config.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/core/train/strategy_host.hpp"

namespace tessera::train {

// What a run will use, resolved before any rank starts: the plugin file
// serving each role (for --dry-run and the log) and the sizes of the run.
struct RunPlan {
  std::string backend;
  std::filesystem::path backend_file;
  OptionValues backend_options;  // [backend.options] resolved: declared defaults filled in
  std::string strategy;
  std::filesystem::path strategy_file;
  OptionValues strategy_options;          // [strategy.options] resolved likewise
  std::string compressor;                 // [compression] name; empty: none
  std::filesystem::path compressor_file;  // its plugin's library
  OptionValues compressor_options;        // [compression.options] resolved
  std::string model;                      // the model's name ("gpt")
  std::filesystem::path model_file;       // the model plugin's library
  int world_size = 1;                     // thread ranks: run.world_size; process ranks: the
                                          // launcher decides (run.world_size if not 1)
  bool thread_ranks = true;               // ranks are threads of this process
  int64_t parameters = 0;                 // distinct parameter elements of the model
  std::string data;                       // the dataset's describe()
  int64_t global_batch = 0;               // examples per step, all ranks together
  int64_t micro_batches = 1;              // per data-parallel rank and step
  int64_t tokens_per_example = 0;         // sequence models: seq_len; 0 otherwise
  std::filesystem::path init_file;        // model.init, empty if none
  std::filesystem::path resume_file;      // checkpoint to resume from, empty if none
  int64_t resume_step = 0;                // its step (0: fresh start)
  int threads_per_rank = 1;               // intra-op threads of each rank
  std::string threads_source;             // "run.threads_per_rank", "2 cores / 1 local rank"
  // Model FLOPs of one step, all ranks together: the units' forward and
  // backward FLOPs per example (model ABI unit_cost) times the global batch.
  double model_flops_per_step = 0;
};

// Checks everything that can be checked before a rank starts and returns
// the plan. Throws tessera::Error (invalid argument unless said otherwise):
//  * an unknown backend or strategy (the message lists the available ones)
//    or options they do not declare;
//  * a world size the strategy refuses (its message says what would work;
//    for process backends this check runs again on the launcher's size);
//  * [compression] naming an unknown compressor or options it does not
//    declare (a strategy that takes no compressor refuses it when created);
//  * the model, the optimizer, the learning-rate schedule or the dataset
//    failing to build (their own messages, naming the key or file);
//  * model.init missing, unreadable, or lacking a parameter / holding one of
//    another shape or dtype (naming the file and the tensor);
//  * checkpoint.resume with a `latest` file that is malformed or names a
//    missing or unreadable checkpoint (full or sharded: index, rank files,
//    slice keys), or one written for another model;
//  * checkpoint.dir that is not a writable directory and cannot be created
//    as one (check_checkpoint_dir: nothing is created here).
// Every file it reads must be a regular file (tessera/core/input_file.hpp).
//  * when the world size is known here (thread ranks, or process ranks
//    with run.world_size > 1) and the strategy has an estimate (strategy
//    interface 2.3): what that estimate refuses for the built model, batch
//    and compressor — the refusals its create would make once the ranks
//    start (a split the model cannot take, a schedule the micro-batches
//    cannot fill, a compressor it cannot use) — and a global batch smaller
//    than its data-parallel ranks x data.micro_batches. A strategy without
//    an estimate is checked by every rank once created, before step 1.
// The run itself (run_training) leaves those checks to the ranks' create,
// which makes them with the strategy's own messages; plan_run is what
// --dry-run reports.
RunPlan plan_run(const Config& config, const PluginRegistry& registry);

// What one log step reports. Times, shares and bytes are averaged over the
// steps since the previous log line; loss and grad_norm are the last step's.
struct StepMetrics {
  int64_t step = 0;
  double loss = 0;             // global mean loss of the last step
  double loss_mean = 0;        // global mean loss averaged over the steps since the previous line
  int64_t window_steps = 0;    // how many steps that is
  double grad_norm = 0;        // global gradient norm before clipping (max over ranks)
  double lr = 0;               // learning rate of the last step
  double step_seconds = 0;     // wall time per step (slowest rank)
  double comm_wait_share = 0;  // blocked-on-communication time / step time (max over ranks)
  double samples_per_second = 0;
  double tokens_per_second = 0;  // sequence models; 0 otherwise
  int64_t comm_bytes = 0;        // bytes sent per step, max over ranks
  // Gradient compression: the bytes per step without it (max over ranks;
  // equal to comm_bytes without compression) and the compressor's time per
  // step (max over ranks).
  int64_t comm_bytes_raw = 0;
  double compress_seconds = 0;
  // Of comm_bytes, the bytes per step sent across nodes by a hierarchical
  // reduction (max over ranks; 0 without one).
  int64_t comm_bytes_cross_node = 0;
  // Pipelines (0 otherwise): measured idle share of the schedule by the
  // wall clock and on the schedule's CPU clock (tessera_step_result), mean
  // over ranks and the log window's steps, and the schedule's formula.
  double bubble = 0;
  double bubble_cpu = 0;
  double bubble_formula = 0;
  // Model FLOP/s per rank (model_flops_per_step / ranks / step_seconds) and
  // its share of the rank's measured sgemm rate (0 when not measured).
  double model_flops_per_second = 0;
  double mfu = 0;
  // f16's dynamic loss scaling (0 otherwise): the scale after the last step
  // and the steps of the window whose update overflowed and was skipped.
  double loss_scale = 0;
  int64_t skipped_steps = 0;
  std::vector<MemoryStats> memory;  // per rank, in rank order (current and peak)
};

struct RunOptions {
  std::ostream* out = nullptr;  // log lines and summary; nullptr: the "train" logger
  bool progress = false;        // draw a progress bar on stderr (a terminal)
  // Tests: after the last step, every rank's state with all replicas
  // (StrategyInstance::save(true)), in rank order. With a process backend
  // only this process's rank is there.
  bool collect_final_state = false;
  // This process joins a world that is already running (`tessera train`
  // under TESSERA_JOIN=1): it connects as a world of itself alone, opens no
  // log and holds no checkpoint directory, and its strategy must grow it
  // into the running world at its first step (elastic); from then on it is
  // one more rank of that world. Process backends with comm_grow only.
  bool joining = false;
};

struct RunResult {
  RunPlan plan;
  int64_t first_step = 1;  // > 1 after a resume
  int64_t last_step = 0;   // first_step - 1 when no step ran
  double final_loss = 0;   // global loss of last_step (0 when no step ran)
  // The global loss averaged over the steps of the last log line (the
  // last run.log_every steps, or fewer), and how many steps that is.
  double final_loss_mean = 0;
  int64_t final_window_steps = 0;
  std::vector<StepMetrics> logged;
  double mean_step_seconds = 0;             // over the steps of this run (slowest rank)
  std::vector<double> rank_step_seconds;    // each rank's own mean step, by rank
  double comm_wait_share = 0;               // over the steps of this run (max over ranks)
  double gemm_rate = 0;                     // sgemm FLOP/s of one rank's threads (mean over ranks)
  double model_flops_per_second = 0;        // per rank, over the steps of this run
  double mfu = 0;                           // model_flops_per_second / gemm_rate
  std::vector<MemoryStats> memory;          // per rank at the end (peaks over the run)
  std::vector<CollectedState> final_state;  // see RunOptions
  std::filesystem::path last_checkpoint;    // file written last; empty if none
};

// Runs the whole training: plan_run, then the backend, one strategy per
// rank, the initial state (resume > model.init > the model's seeded init),
// the steps, the logs, metrics and checkpoints, and the summary. With
// checkpoint.dir set, the run holds it for its whole duration
// (CheckpointDirLock, checkpoint_dir.hpp: created, probed, locked, stale
// temporary files removed) — the process with thread ranks, rank 0 with
// process ranks — before its first step. Throws tessera::Error from
// plan_run or the lock (with thread ranks), or "rank R: <cause>" when a
// rank fails (the others are released through Communicator::abort and
// their secondary errors dropped), keeping the status of the cause.
RunResult run_training(const Config& config, const PluginRegistry& registry,
                       const RunOptions& options = {});

}  // namespace tessera::train

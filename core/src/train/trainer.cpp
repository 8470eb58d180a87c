// run_training: opens the backend, starts the ranks (threads or this
// process), runs each rank's loop and turns a rank's failure into one error
// naming the rank.
#include "tessera/core/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "prepared_run.hpp"
#include "run_fingerprint.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/core/device.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/rank_threads.hpp"
#include "tessera/core/train/checkpoint_dir.hpp"
#include "tessera/core/train/compute_rate.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace {

using PreparedRun = detail::PreparedRun;
using RankOutput = detail::RankOutput;
using RankShared = detail::RankShared;

// Runs `body` and rethrows what it throws as tessera::Error "rank R: ...",
// keeping the status of a tessera::Error; R is read when it throws (a rank
// that joined a running world is named by its rank there).
template <typename Body>
void as_rank(const int& rank, Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    throw Error(e.status(), fmt::format("rank {}: {}", rank, e.what()));
  } catch (const std::bad_alloc&) {
    throw Error(TESSERA_ERR_OUT_OF_MEMORY, fmt::format("rank {}: out of memory", rank));
  } catch (const std::exception& e) {
    throw Error(TESSERA_ERR_INTERNAL, fmt::format("rank {}: {}", rank, e.what()));
  }
}

RunLogOptions log_options(const Config& config, const PreparedRun& run, const RunOptions& options) {
  RunLogOptions o;
  o.out = options.out;
  o.progress = options.progress;
  o.metrics_path = config.run.metrics;
  o.append_metrics = run.plan.resume_step > 0;
  o.total_steps = config.run.steps;
  o.sequence = run.plan.tokens_per_example > 0;
  return o;
}

// The CPU's sgemm rate for MFU, or 0 (no MFU) on a CUDA run.
double host_gemm_rate(int threads) {
  return run_device() == ComputeDevice::cuda ? 0.0 : measure_gemm_rate(threads);
}

// "compute: 2 threads per rank (2 cores / 1 local rank), sgemm 160.2
// GFLOP/s per rank (measured), model 10.94 GFLOP per step"
std::string compute_line(const RunPlan& plan, double gemm_rate) {
  if (run_device() == ComputeDevice::cuda) {
    return fmt::format(
        "compute: one CUDA device per rank (its LOCAL_RANK), model {:.2f} GFLOP per step (no MFU: "
        "the device's peak is not measured)",
        plan.model_flops_per_step / 1e9);
  }
  return fmt::format(
      "compute: {} thread{} per rank ({}), sgemm {:.1f} GFLOP/s per rank (measured at start), "
      "model {:.2f} GFLOP per step",
      plan.threads_per_rank, plan.threads_per_rank == 1 ? "" : "s", plan.threads_source,
      gemm_rate / 1e9, plan.model_flops_per_step / 1e9);
}

void announce(RunLog& log, const PreparedRun& run, const Config& config, double gemm_rate,
              const CheckpointDirLock* dir_lock) {
  for (const auto& line : detail::describe_run(run, config)) log.message(line);
  log.message(compute_line(run.plan, gemm_rate));
  if (dir_lock != nullptr) {
    if (const std::string removed = dir_lock->removed_files_message(); !removed.empty()) {
      log.message(removed);
    }
  }
}

// A rank's failure as its message says it (without a source location).
std::string failure_text(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    return e.message();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

// `text`, rank `rank`'s failure, without what names that rank: the
// "rank R: " it starts with and the "(rank R)" of a plugin call's prefix
// ("strategy 'pipeline' (rank R): step 1: ..."), so that the same cause met
// on two ranks compares equal.
std::string rank_neutral(std::string_view text, int rank) {
  const std::string lead = fmt::format("rank {}: ", rank);
  if (text.starts_with(lead)) text.remove_prefix(lead.size());
  std::string out(text);
  const std::string own = fmt::format("(rank {})", rank);
  for (std::size_t at = out.find(own); at != std::string::npos; at = out.find(own, at)) {
    out.replace(at, own.size(), "(rank)");
  }
  return out;
}

// Rethrows the run's first failure. When a later one has a cause of its
// own (its message does not carry the first's, as the other ranks' do when
// the first aborted their groups, nor is the same cause met on another
// rank), e.g. the survivors of an elastic run that could not go on without
// the failed rank, the error says it too.
[[noreturn]] void rethrow_failures(const RankFailures& outcome, const std::vector<int>& failed) {
  const std::string first = failure_text(outcome.first);
  const auto first_at = std::find(outcome.each.begin(), outcome.each.end(), outcome.first);
  const std::string cause = rank_neutral(
      first,
      first_at == outcome.each.end() ? -1 : static_cast<int>(first_at - outcome.each.begin()));
  for (const int r : failed) {
    const std::string text = failure_text(outcome.each[static_cast<size_t>(r)]);
    if (rank_neutral(text, r).find(cause) != std::string::npos) continue;
    try {
      std::rethrow_exception(outcome.first);
    } catch (const Error& e) {
      throw Error(e.status(), fmt::format("{}; then rank {} failed too: {}", first, r, text));
    } catch (...) {
      throw Error(TESSERA_ERR_INTERNAL,
                  fmt::format("{}; then rank {} failed too: {}", first, r, text));
    }
  }
  std::rethrow_exception(outcome.first);
}

// Every rank a thread of this process; rank 0 runs on the calling thread
// and owns the log.
std::vector<RankOutput> run_thread_ranks(Backend& backend, const RankShared& shared,
                                         const RunOptions& options) {
  const Config& config = *shared.config;
  // The process is the run: it holds checkpoint.dir until every rank ends.
  std::optional<CheckpointDirLock> dir_lock;
  if (!config.checkpoint.dir.empty()) dir_lock.emplace(config.checkpoint.dir);
  const int world = config.run.world_size;
  MemoryTracker::instance().reset(world);
  RunLog log(log_options(config, *shared.run, options));
  announce(log, *shared.run, config, shared.gemm_rate, dir_lock ? &*dir_lock : nullptr);

  SharedMemoryGather gather(world);
  RankShared with_gather = shared;
  with_gather.gather = &gather;
  // Rank 0 was lost and another rank is rank 0 of the re-formed world.
  with_gather.open_log = [&log]() -> RunLog* { return &log; };
  std::vector<RankOutput> outputs(static_cast<size_t>(world));
  std::vector<std::unique_ptr<Communicator>> comms(static_cast<size_t>(world));
  std::mutex comms_mu;

  const auto body = [&](int rank) {
    as_rank(rank, [&] {
      std::unique_ptr<Communicator> comm = backend.connect(rank);
      Communicator* mine = comm.get();
      {
        const std::lock_guard lock(comms_mu);
        comms[static_cast<size_t>(rank)] = std::move(comm);
      }
      detail::run_rank(with_gather, *mine, rank == 0 ? &log : nullptr,
                       outputs[static_cast<size_t>(rank)]);
    });
  };
  // Release the ranks waiting for the failed one: abort the world group.
  const auto on_failure = [&](int rank, const std::string& message) {
    const std::lock_guard lock(comms_mu);
    Communicator* target = comms[static_cast<size_t>(rank)].get();
    for (size_t r = 0; target == nullptr && r < comms.size(); ++r) target = comms[r].get();
    if (target != nullptr) target->abort(message);
  };
  const RankFailures outcome = run_rank_threads_each(world, body, on_failure);
  const std::vector<std::exception_ptr>& failures = outcome.each;
  // A failed rank fails the run, unless the others went on without it: they
  // re-formed the world without the failed ranks (elastic) and finished.
  std::vector<int> failed;
  for (int r = 0; r < world; ++r) {
    if (failures[static_cast<size_t>(r)]) failed.push_back(r);
  }
  if (failed.empty()) return outputs;
  const int left = world - static_cast<int>(failed.size());
  bool survived = left > 0;
  for (int r = 0; r < world && survived; ++r) {
    if (!failures[static_cast<size_t>(r)])
      survived = outputs[static_cast<size_t>(r)].world_size == left;
  }
  if (!survived) rethrow_failures(outcome, failed);
  std::vector<RankOutput> survivors;
  for (int r = 0; r < world; ++r) {
    if (failures[static_cast<size_t>(r)]) {
      try {
        std::rethrow_exception(failures[static_cast<size_t>(r)]);
      } catch (const std::exception& e) {
        log.message(
            fmt::format("rank {} failed and the other ranks went on without it: {}", r, e.what()));
      }
    } else {
      survivors.push_back(std::move(outputs[static_cast<size_t>(r)]));
    }
  }
  return survivors;
}

// This process is one rank of a world its launcher started.
RankOutput run_process_rank(Backend& backend, const RankShared& shared, const RunOptions& options,
                            const PluginRegistry& registry, PreparedRun& run) {
  const Config& config = *shared.config;
  const std::unique_ptr<Communicator> comm = backend.connect(-1);
  const int rank = comm->rank();
  const ThreadRankGuard guard(rank);
  RankOutput output;
  output.rank = rank;
  as_rank(output.rank, [&] {
    try {
      const int world = comm->size();
      // A joining rank starts as a world of itself alone.
      if (!shared.joining && config.run.world_size != 1 && config.run.world_size != world) {
        throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                    fmt::format("run.world_size = {}, but backend '{}' started {} ranks",
                                config.run.world_size, config.backend.name, world));
      }
      // Strategy "auto": one choice for every rank, made by rank 0.
      if (!run.strategy) detail::select_on_ranks(config, registry, *comm, run);
      run.strategy->check(world);
      // Rank 0 holds checkpoint.dir for the run; a failure here aborts the
      // world, so the other ranks stop too.
      std::optional<CheckpointDirLock> dir_lock;
      // (Not a joining rank: it is rank 0 of its own world only.)
      const bool lead = rank == 0 && !shared.joining;
      if (lead && !config.checkpoint.dir.empty()) dir_lock.emplace(config.checkpoint.dir);
      MemoryTracker::instance().reset(world, rank);
      // Every rank measures its own peak (the ranks of a node at once).
      const double gemm_rate = host_gemm_rate(run.plan.threads_per_rank);
      std::optional<RunLog> log;
      if (lead) {
        log.emplace(log_options(config, *shared.run, options));
        announce(*log, *shared.run, config, gemm_rate, dir_lock ? &*dir_lock : nullptr);
      }
      MessageGather gather;
      RankShared with_gather = shared;
      with_gather.gather = &gather;
      with_gather.gemm_rate = gemm_rate;
      with_gather.fingerprint = detail::run_fingerprint(config, run.plan);
      // Rank 0 was lost and this process is rank 0 of the re-formed world:
      // the log goes on here, after the metrics lines rank 0 wrote.
      with_gather.open_log = [&]() -> RunLog* {
        RunLogOptions o = log_options(config, *shared.run, options);
        o.append_metrics = true;
        log.emplace(std::move(o));
        return &*log;
      };
      detail::run_rank(with_gather, *comm, log ? &*log : nullptr, output);
    } catch (const std::exception& e) {
      comm->abort(fmt::format("rank {} failed: {}", output.rank, e.what()));
      throw;
    }
  });
  return output;
}

}  // namespace

RunResult run_training(const Config& config, const PluginRegistry& registry,
                       const RunOptions& options) {
  // The device first: a CUDA run without a device stops before any plugin
  // is built, and the model builds its units for the device.
  const RunDeviceGuard device(config.run.device, config.run.precision);
  PreparedRun run = detail::prepare_run(config, registry);
  // Every plugin of this process reads it through the host table.
  const IntraOpThreadsGuard intra_op(run.plan.threads_per_rank);
  BackendSettings settings;
  settings.world_size = run.plan.thread_ranks ? config.run.world_size : -1;
  settings.timeout = timeout_ms(config.backend.timeout_s, "backend.timeout_s");
  settings.checks =
      config.backend.check_collectives ? CollectiveChecks::verify : CollectiveChecks::record;
  // The backend refuses joining unless it can grow a running world.
  settings.joining = options.joining;
  if (options.joining) {
    TESSERA_CHECK(config.run.precision != ComputePrecision::f16, TESSERA_ERR_INVALID_ARGUMENT,
                  "TESSERA_JOIN=1: an f16 run's loss scale is the host's own state, which a "
                  "joining rank cannot receive (use run.precision = \"bf16\" or \"f32\")");
  }
  const std::unique_ptr<Backend> backend =
      open_backend(registry, config.backend.name, &config.backend.options,
                   config.backend.options_where, settings);

  RankShared shared;
  shared.config = &config;
  shared.run = &run;
  shared.tensor_order = checkpoint_tensor_order(*run.model, *run.optimizer);
  shared.fingerprint = detail::run_fingerprint(config, run.plan);
  shared.collect_final_state = options.collect_final_state;
  shared.joining = options.joining;
  // Ranks as threads: measured once, before they start (one rank's threads).
  if (backend->thread_ranks()) shared.gemm_rate = host_gemm_rate(run.plan.threads_per_rank);

  std::vector<RankOutput> outputs;
  if (backend->thread_ranks()) {
    outputs = run_thread_ranks(*backend, shared, options);
  } else {
    outputs.push_back(run_process_rank(*backend, shared, options, registry, run));
  }

  RunResult result;
  result.plan = run.plan;
  result.first_step = run.plan.resume_step + 1;
  RankOutput& lead = outputs.front();
  result.last_step = lead.last_step;
  result.final_loss = lead.final_loss;
  result.final_loss_mean = lead.final_loss_mean;
  result.final_window_steps = lead.final_window_steps;
  result.logged = std::move(lead.logged);
  result.mean_step_seconds = lead.mean_step_seconds;
  result.rank_step_seconds = lead.rank_step_seconds;
  result.comm_wait_share = lead.comm_wait_share;
  result.gemm_rate = lead.gemm_rate;
  result.model_flops_per_second = lead.model_flops_per_second;
  result.mfu = lead.mfu;
  result.memory = std::move(lead.memory);
  result.last_checkpoint = lead.last_checkpoint;
  for (auto& output : outputs) {
    if (output.final_state) result.final_state.push_back(std::move(*output.final_state));
  }
  return result;
}

}  // namespace tessera::train

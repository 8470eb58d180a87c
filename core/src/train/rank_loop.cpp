// One rank's run: strategy, initial state, the step loop with its
// collective log reductions, checkpoints and the summary.
#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "prepared_run.hpp"
#include "run_fingerprint.hpp"
#include "tessera/core/data/sampler.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/train/loss_scaler.hpp"
#include "tessera/core/train/selection.hpp"
#include "tessera/core/train/sharded_checkpoint.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Sums over the steps since the last log line (or over the whole run).
struct Window {
  int64_t steps = 0;
  double seconds = 0;
  double wait_seconds = 0;
  double bytes = 0;
  double bytes_raw = 0;  // without gradient compression
  double compress_seconds = 0;
  double bytes_cross_node = 0;  // hierarchical reductions
  double last_loss = 0;         // this rank's share of the last step's loss
  double loss_sum = 0;          // this rank's shares of the steps' losses, summed
  double last_grad_norm = 0;    // of the last step that updated
  int64_t skipped = 0;          // steps whose update overflowed (f16)
  double bubble = 0;            // summed over the steps
  double bubble_cpu = 0;
  double bubble_formula = 0;

  void add(const tessera_step_result& r, double step_seconds) {
    ++steps;
    seconds += step_seconds;
    wait_seconds += static_cast<double>(r.comm_wait_ns) * 1e-9;
    bytes += static_cast<double>(r.comm_bytes);
    // A strategy older than 2.4 leaves comm_bytes_raw 0: no compression.
    // (It may be below comm_bytes: an encoding that sends more than f32.)
    bytes_raw += static_cast<double>(r.comm_bytes_raw != 0 ? r.comm_bytes_raw : r.comm_bytes);
    compress_seconds += static_cast<double>(r.compress_ns) * 1e-9;
    bytes_cross_node += static_cast<double>(r.comm_bytes_cross_node);
    last_loss = r.loss;
    loss_sum += r.loss;
    if (r.skipped != 0) {
      ++skipped;
    } else {
      last_grad_norm = r.grad_norm;
    }
    bubble += r.bubble;
    bubble_cpu += r.bubble_cpu;
    bubble_formula = r.bubble_formula;
  }
  [[nodiscard]] double mean_seconds() const {
    return steps == 0 ? 0.0 : seconds / static_cast<double>(steps);
  }
  [[nodiscard]] double wait_share() const {
    return seconds > 0 ? std::min(1.0, wait_seconds / seconds) : 0.0;
  }
};

constexpr size_t kCategories = TESSERA_MEM_CATEGORY_COUNT;
constexpr size_t kMemoryWords = 2 * kCategories + 2;

// Every rank's memory counters, in rank order (collective: allgather).
// `tracked_as`: the rank this rank's memory is counted under (its rank when
// the run started; a re-formed world renumbers the ranks, not the counters).
std::vector<MemoryStats> gather_memory(Communicator& comm, int tracked_as) {
  const MemoryStats mine = MemoryTracker::instance().stats(tracked_as);
  std::array<int64_t, kMemoryWords> words{};
  std::copy(mine.current.begin(), mine.current.end(), words.begin());
  std::copy(mine.peak.begin(), mine.peak.end(), words.begin() + kCategories);
  words[kMemoryWords - 2] = mine.total_current;
  words[kMemoryWords - 1] = mine.total_peak;
  std::vector<int64_t> all(kMemoryWords * static_cast<size_t>(comm.size()));
  comm.allgather(cpu_buffer(std::span<int64_t>(words)), cpu_buffer(std::span<int64_t>(all)));
  std::vector<MemoryStats> stats(static_cast<size_t>(comm.size()));
  for (size_t r = 0; r < stats.size(); ++r) {
    const int64_t* w = all.data() + r * kMemoryWords;
    std::copy(w, w + kCategories, stats[r].current.begin());
    std::copy(w + kCategories, w + 2 * kCategories, stats[r].peak.begin());
    stats[r].total_current = w[kMemoryWords - 2];
    stats[r].total_peak = w[kMemoryWords - 1];
  }
  return stats;
}

// Model FLOP/s per rank at `step_seconds` per step, and its share of the
// mean sgemm rate per rank (0 when not measured).
std::pair<double, double> model_flops(const RunPlan& plan, int world, double step_seconds,
                                      double gemm_rate) {
  if (step_seconds <= 0) return {0.0, 0.0};
  const double per_rank = plan.model_flops_per_step / static_cast<double>(world) / step_seconds;
  return {per_rank, gemm_rate > 0 ? per_rank / gemm_rate : 0.0};
}

// The log step's metrics (collective: every rank calls it at the same step).
StepMetrics reduce_window(Communicator& comm, int tracked_as, const Window& window, int64_t step,
                          float lr, const RunPlan& plan, double gemm_rate) {
  const double per_step = window.steps == 0 ? 0.0 : 1.0 / static_cast<double>(window.steps);
  std::array<double, 4> sums{window.last_loss, window.bubble * per_step,
                             window.bubble_cpu * per_step, window.loss_sum * per_step};
  std::array<double, 8> maxes{window.mean_seconds(),
                              window.wait_share(),
                              window.bytes * per_step,
                              window.last_grad_norm,
                              window.bubble_formula,
                              window.bytes_raw * per_step,
                              window.compress_seconds * per_step,
                              window.bytes_cross_node * per_step};
  comm.allreduce(std::span<double>(sums), TESSERA_SUM);
  comm.allreduce(std::span<double>(maxes), TESSERA_MAX);
  StepMetrics m;
  m.step = step;
  m.loss = sums[0];
  m.loss_mean = sums[3];
  m.window_steps = window.steps;
  m.lr = lr;
  m.step_seconds = maxes[0];
  m.comm_wait_share = maxes[1];
  m.comm_bytes = static_cast<int64_t>(maxes[2]);
  m.grad_norm = maxes[3];
  m.bubble = sums[1] / static_cast<double>(comm.size());
  m.bubble_cpu = sums[2] / static_cast<double>(comm.size());
  m.bubble_formula = maxes[4];
  m.comm_bytes_raw = static_cast<int64_t>(maxes[5]);
  m.compress_seconds = maxes[6];
  m.comm_bytes_cross_node = static_cast<int64_t>(maxes[7]);
  if (m.step_seconds > 0) {
    m.samples_per_second = static_cast<double>(plan.global_batch) / m.step_seconds;
    m.tokens_per_second = m.samples_per_second * static_cast<double>(plan.tokens_per_example);
  }
  std::tie(m.model_flops_per_second, m.mfu) =
      model_flops(plan, comm.size(), m.step_seconds, gemm_rate);
  m.memory = gather_memory(comm, tracked_as);
  return m;
}

// Every rank loads the same source: resume > model.init > the model's init.
// A sharded checkpoint is opened once per rank (its reader is not
// thread-safe); each strategy reads the slices it owns, whatever world size
// wrote them.
void load_initial_state(const PreparedRun& run, const Config& config, Communicator& comm,
                        RunLog* log, StrategyInstance& strategy) {
  if (run.resume) {
    const auto written = run.resume->metadata.find("world_size");
    if (log != nullptr && written != run.resume->metadata.end() &&
        written->second != std::to_string(comm.size())) {
      const std::string line = fmt::format(
          "checkpoint: resharding {} -> {} ranks ({} checkpoint {})", written->second, comm.size(),
          run.resume->format == CheckpointFormat::sharded ? "sharded" : "full",
          run.resume->file.string());
      log->message(line);
    }
    strategy.load(*checkpoint_source(run.resume->file));
    return;
  }
  if (!config.model.init.empty()) {
    const auto file = checkpoint_source(config.model.init);
    strategy.load(ParametersOnly(*file));
    return;
  }
  strategy.load(*init_source(*run.model, config.run.seed));
}

void check_layout(const tessera_strategy_layout& layout, const Config& config,
                  const std::string& strategy, int world) {
  if (layout.data_size < 1 || layout.data_rank < 0 || layout.data_rank >= layout.data_size) {
    throw Error(TESSERA_ERR_INTERNAL,
                fmt::format("strategy '{}' reported data rank {} of {} (it must be in [0, size))",
                            strategy, layout.data_rank, layout.data_size));
  }
  check_batch_feeds(config.data.batch_size, config.data.micro_batches, layout.data_size, strategy,
                    world);
}

// The strategy recorded is the one that ran: with strategy "auto", the
// selector's choice, its options and the selector.
std::map<std::string, std::string> checkpoint_metadata(const RankShared& s, int world) {
  const Config& config = *s.config;
  std::map<std::string, std::string> metadata{
      {"producer", "tessera"},
      {"world_size", std::to_string(world)},
      {"strategy", s.run->plan.strategy},
      {"model", config.model.name},
      {"optimizer", config.optimizer.name},
      {"seed", std::to_string(config.run.seed)},
      {"steps", std::to_string(config.run.steps)},
      {"batch_size", std::to_string(config.data.batch_size)},
      {"micro_batches", std::to_string(config.data.micro_batches)}};
  if (s.run->selection) {
    metadata["strategy_options"] = s.run->selection->choice().options;
    metadata["selected_by"] = s.run->selection->selector;
  }
  return metadata;
}

// Collective, format "sharded": rank 0 clears the step directory of an
// earlier attempt, every rank writes its own pieces to its own file, the
// slice records go to rank 0, which writes the index and then `latest`. A
// failure on any rank aborts the world before `latest` changes.
void write_sharded_step_checkpoint(const RankShared& s, Communicator& comm,
                                   StrategyInstance& strategy, int64_t step, RunLog* log,
                                   RankOutput& out) {
  const Config& config = *s.config;
  const std::filesystem::path dir = config.checkpoint.dir;
  const std::filesystem::path step_dir = dir / checkpoint_dir_name(step);
  if (comm.rank() == 0) (void)prepare_sharded_step_dir(dir, step);
  comm.barrier();  // the directory exists and holds nothing of an earlier attempt
  std::map<std::string, std::string> metadata = checkpoint_metadata(s, comm.size());
  metadata["step"] = std::to_string(step);
  std::vector<SliceRecord> records =
      write_rank_shard(step_dir, comm.rank(), strategy.save(step), std::move(metadata));
  std::vector<SliceRecord> all = gather_slice_records(comm, std::move(records));
  if (comm.rank() == 0) {
    out.last_checkpoint = write_sharded_index(dir, step, comm.size(), all, s.tensor_order,
                                              checkpoint_metadata(s, comm.size()));
    if (log != nullptr) log->message("checkpoint: " + out.last_checkpoint.string());
  }
  comm.barrier();  // the checkpoint is complete (or rank 0 failed and aborted)
}

// Collective: every rank's pieces go to rank 0, which writes the files.
void write_step_checkpoint(const RankShared& s, Communicator& comm, StrategyInstance& strategy,
                           int64_t step, RunLog* log, RankOutput& out) {
  const Config& config = *s.config;
  if (config.checkpoint.format == "sharded") {
    write_sharded_step_checkpoint(s, comm, strategy, step, log, out);
    return;
  }
  std::optional<CollectedState> merged = s.gather->gather(comm, strategy.save(step));
  if (merged) {
    out.last_checkpoint = write_checkpoint(config.checkpoint.dir, step, *merged, s.tensor_order,
                                           checkpoint_metadata(s, comm.size()));
    if (log != nullptr) log->message("checkpoint: " + out.last_checkpoint.string());
  }
  comm.barrier();  // the checkpoint is complete (or rank 0 failed and aborted)
}

bool checkpoint_due(const Config& config, int64_t step) {
  if (config.checkpoint.dir.empty()) return false;
  if (step == config.run.steps) return true;
  return config.checkpoint.every > 0 && step % config.checkpoint.every == 0;
}

}  // namespace

void run_rank(const RankShared& s, Communicator& comm, RunLog* log, RankOutput& out) {
  const Config& config = *s.config;
  const PreparedRun& run = *s.run;
  // First, before anything whose shape depends on the configuration.
  check_ranks_agree(comm, s.fingerprint);
  // The rank's compressor outlives its strategy (declared first).
  const std::unique_ptr<CompressorPlugin::Instance> compressor =
      run.compressor != nullptr ? run.compressor->create() : nullptr;
  const std::unique_ptr<StrategyInstance> strategy =
      run.strategy->create(comm, *run.model, *run.optimizer, compressor.get(),
                           run.compressor != nullptr ? run.compressor->name() : std::string(),
                           s.joining, config.data.micro_batches);
  const tessera_strategy_layout layout = strategy->layout();
  check_layout(layout, config, run.plan.strategy, comm.size());
  std::optional<DistributedSampler> sampler;
  sampler.emplace(*run.dataset, config.run.seed, config.data.batch_size, layout.data_rank,
                  layout.data_size);
  load_initial_state(run, config, comm, log, *strategy);
  // The world the host's own collectives run on: `comm`, or the world the
  // strategy re-formed after losing ranks (elastic), which it owns.
  Communicator* world = &comm;
  std::unique_ptr<Communicator> reformed;
  const int tracked_as = comm.rank();
  // A failure after the world was re-formed releases the ranks waiting on
  // the new world (the caller aborts only the one it gave).
  class AbortReformed {
   public:
    explicit AbortReformed(const std::unique_ptr<Communicator>& r) : reformed_(r) {}
    AbortReformed(const AbortReformed&) = delete;
    AbortReformed& operator=(const AbortReformed&) = delete;
    ~AbortReformed() {
      if (reformed_ && std::uncaught_exceptions() > exceptions_) {
        reformed_->abort("rank " + std::to_string(reformed_->rank()) + " failed");
      }
    }

   private:
    const std::unique_ptr<Communicator>& reformed_;
    int exceptions_ = std::uncaught_exceptions();
  };
  const AbortReformed abort_reformed(reformed);

  // The model returns the SUM of per-example (per-token) losses times this,
  // so gradients summed over micro-batches and ranks are the global mean's.
  const auto tokens = static_cast<double>(std::max<int64_t>(run.plan.tokens_per_example, 1));
  const auto loss_scale =
      static_cast<float>(1.0 / (static_cast<double>(config.data.batch_size) * tokens));
  // The global batch of every step, for tessera_step_args (tokens: sequence
  // models only).
  const int64_t global_examples = config.data.batch_size;
  const int64_t global_tokens = config.data.batch_size * run.plan.tokens_per_example;
  const std::vector<float> loss_scales(static_cast<size_t>(config.data.micro_batches), loss_scale);
  // f16: dynamic loss scaling; the scaled loss scales handed to each step.
  std::optional<LossScaler> scaler;
  if (config.run.precision == ComputePrecision::f16) {
    scaler.emplace(config.run.loss_scale, config.run.loss_scale_window);
  }
  std::vector<float> scaled_losses = loss_scales;

  // The mean sgemm rate per rank, for the model FLOP utilisation.
  std::array<double, 1> rate{s.gemm_rate};
  comm.allreduce(std::span<double>(rate), TESSERA_SUM);
  const double gemm_rate = rate[0] / static_cast<double>(comm.size());
  out.gemm_rate = gemm_rate;

  const int64_t first = run.plan.resume_step + 1;
  const int64_t last = config.run.steps;
  out.last_step = first > last ? first - 1 : last;
  Window window;
  Window total;
  // A joining rank's first step admits it into the running world.
  bool awaiting_admission = s.joining;
  for (int64_t step = first; step <= last; ++step) {
    const auto start = Clock::now();
    const std::vector<Batch> micro = sampler->micro_batches(step, config.data.micro_batches);
    const float lr = run.schedule->lr(step);
    const auto grad_scale = static_cast<float>(scaler ? scaler->scale() : 1.0);
    for (size_t i = 0; i < loss_scales.size(); ++i) scaled_losses[i] = loss_scales[i] * grad_scale;
    tessera_step_result result =
        strategy->step(micro, scaled_losses, step, lr, config.optimizer.grad_clip, global_examples,
                       global_tokens, grad_scale);
    const bool joining = awaiting_admission;
    awaiting_admission = false;
    if (joining && result.world_changed == 0) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  fmt::format("TESSERA_JOIN=1: strategy '{}' trained step {} on this rank alone "
                              "instead of admitting it into the running world (joining needs a "
                              "strategy that grows its world: elastic)",
                              run.plan.strategy, step));
    }
    if (result.world_changed != 0) {
      // Ranks were lost (the strategy re-formed the world of the survivors)
      // or, before this step, new ones were admitted; the strategy holds the
      // state after restored_step: go on from there, on the new world, with
      // each rank's new slice of the same batches.
      const tessera_strategy_world changed = strategy->world();
      // The failed step itself when it was done but what followed failed.
      // A joining rank takes on the running world's step, whatever it is.
      const int64_t lowest = joining ? first - 1 : run.plan.resume_step;
      const int64_t highest = joining ? last : step;
      TESSERA_CHECK(result.restored_step >= lowest && result.restored_step <= highest,
                    TESSERA_ERR_INTERNAL, "strategy '", run.plan.strategy, "' restored step ",
                    result.restored_step, " at step ", step, " (it must be in [", lowest, ", ",
                    highest, "])");
      const int before = joining ? 0 : world->size();
      reformed = comm.borrow(changed.comm);
      world = reformed.get();
      if (joining) out.rank = world->rank();
      // Whoever joined must run the same configuration: a rank that does
      // not fails alone, and the others lose it like any lost rank. The
      // check runs after every change, losses included, so that every rank
      // of the new world posts it: whether an earlier check was cut short
      // differs from rank to rank (see below).
      std::string cut_short;
      try {
        check_ranks_agree(*world, s.fingerprint, /*throw_all=*/false);
      } catch (const Error& e) {
        if (e.status() == TESSERA_ERR_MISMATCH) throw;  // this rank differs
        // A rank left during the exchange: a joiner that differs leaves as
        // soon as it has the others' fingerprints, which may be before
        // this rank has them all (and after another has). The next step
        // fails on the lost rank and the strategy recovers as from any
        // loss; the check runs again on the world it re-forms.
        cut_short = e.what();
      }
      check_layout(changed.layout, config, run.plan.strategy, world->size());
      sampler.emplace(*run.dataset, config.run.seed, config.data.batch_size,
                      changed.layout.data_rank, changed.layout.data_size);
      if (log == nullptr && world->rank() == 0 && s.open_log) log = s.open_log();
      if (log != nullptr) {
        const std::string why = changed.reason != nullptr ? changed.reason : "";
        if (world->size() > before) {
          log->message(fmt::format("elastic: world {} -> {} ranks before step {}: {}", before,
                                   world->size(), result.restored_step + 1, why));
        } else {
          log->message(
              fmt::format("elastic: step {} failed; world {} -> {} ranks, going on from "
                          "step {}: {}",
                          step, before, world->size(), result.restored_step + 1, why));
        }
        if (!cut_short.empty()) {
          log->message(
              fmt::format("elastic: the check that the ranks run the same "
                          "configuration was cut short ({}); it runs again when the "
                          "world next changes",
                          cut_short));
        }
      }
      window = Window{};
      step = result.restored_step;  // the loop's ++ makes it the next step to run
      continue;
    }
    if (scaler) {
      // The strategy reported the scaled loss; every rank sees the same
      // overflow (from the global sum of squares) and keeps the same scale.
      const double scale = scaler->scale();  // what grad_scale holds, as a double
      result.loss /= scale;
      const LossScaler::Change change = scaler->update(result.skipped != 0);
      if (log != nullptr && change == LossScaler::Change::lowered) {
        log->message(fmt::format(
            "step {}: f16 gradients overflowed at loss scale {}: update skipped, scale now {}",
            step, scale, scaler->scale()));
      } else if (log != nullptr && change == LossScaler::Change::raised) {
        log->message(fmt::format("step {}: {} steps without an overflow, loss scale raised to {}",
                                 step, config.run.loss_scale_window, scaler->scale()));
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    window.add(result, seconds);
    total.add(result, seconds);
    if (step % config.run.log_every == 0 || step == last) {
      StepMetrics metrics =
          reduce_window(*world, tracked_as, window, step, lr, run.plan, gemm_rate);
      if (scaler) {
        metrics.loss_scale = scaler->scale();
        metrics.skipped_steps = window.skipped;
      }
      out.final_loss = metrics.loss;
      out.final_loss_mean = metrics.loss_mean;
      out.final_window_steps = metrics.window_steps;
      if (log != nullptr) log->logged(metrics);
      out.logged.push_back(std::move(metrics));
      window = Window{};
    }
    if (log != nullptr) log->step_done(step);
    if (checkpoint_due(config, step)) write_step_checkpoint(s, *world, *strategy, step, log, out);
  }

  // Each rank's mean step and wait share: the run's are the slowest's, and
  // the summary names ranks whose steps differ (a straggler, or workers
  // that run ahead of it: async_sgd).
  std::array<double, 2> mine{total.mean_seconds(), total.wait_share()};
  std::vector<double> every(2 * static_cast<size_t>(world->size()));
  world->allgather(cpu_buffer(std::span<double>(mine)), cpu_buffer(std::span<double>(every)));
  out.rank_step_seconds.clear();
  for (size_t r = 0; r < every.size(); r += 2) {
    out.rank_step_seconds.push_back(every[r]);
    out.mean_step_seconds = std::max(out.mean_step_seconds, every[r]);
    out.comm_wait_share = std::max(out.comm_wait_share, every[r + 1]);
  }
  std::tie(out.model_flops_per_second, out.mfu) =
      model_flops(run.plan, world->size(), out.mean_step_seconds, gemm_rate);
  out.memory = gather_memory(*world, tracked_as);
  out.world_size = world->size();
  if (log != nullptr) {
    RunSummary summary;
    summary.first_step = first;
    summary.last_step = out.last_step;
    summary.final_loss = out.final_loss;
    summary.final_loss_mean = out.final_loss_mean;
    summary.final_window_steps = out.final_window_steps;
    summary.mean_step_seconds = out.mean_step_seconds;
    summary.rank_step_seconds = out.rank_step_seconds;
    if (out.mean_step_seconds > 0) {
      summary.samples_per_second =
          static_cast<double>(run.plan.global_batch) / out.mean_step_seconds;
      summary.tokens_per_second =
          summary.samples_per_second * static_cast<double>(run.plan.tokens_per_example);
    }
    summary.comm_wait_share = out.comm_wait_share;
    summary.model_flops_per_second = out.model_flops_per_second;
    summary.mfu = out.mfu;
    summary.memory = out.memory;
    summary.checkpoint = out.last_checkpoint;
    log->summary(summary);
  }
  if (s.collect_final_state) out.final_state = strategy->save(out.last_step, /*all_replicas=*/true);
}

}  // namespace tessera::train::detail

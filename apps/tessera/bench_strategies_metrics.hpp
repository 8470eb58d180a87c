// `tessera bench strategies`: what one strategy's run measured, read back
// from the metrics file (JSON lines, docs/training.md) its child process
// wrote with run.log_every = 1.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <istream>
#include <string>

namespace tessera::cli {

// Memory categories shown by the benchmark, in column order.
enum class BenchMemColumn { kParams = 0, kGrads, kOptimizer, kComm, kActivations };
inline constexpr int kBenchMemColumns = 5;

// The numbers of one strategy's run.
struct StrategyMeasure {
  int64_t lines = 0;           // metrics lines read (one per step)
  int64_t first_averaged = 0;  // first and last step averaged below
  int64_t last_averaged = 0;
  double step_seconds = 0;  // mean wall time per step (slowest rank)
  double sent_bytes = 0;    // mean bytes sent per step (largest rank)
  // Pipelines (0 otherwise): mean measured bubble by the wall clock and on
  // the schedule's CPU clock, and the schedule's formula, over the same steps.
  double bubble = 0;
  double bubble_cpu = 0;
  double bubble_formula = 0;
  // Peak tracked bytes per rank of each category (max over ranks), and the
  // peak of a rank's sum over every category, "other" included (max over
  // ranks). Peaks are taken from the last line, which holds the run's peaks.
  std::array<int64_t, kBenchMemColumns> peak{};
  int64_t total_peak = 0;
  int ranks = 0;  // ranks in the memory array of the last line
};

// Reads the metrics lines of a run logged at every step and summarises
// them. Step time and bytes sent are averaged over every step after the
// first (the first step warms caches and allocates buffers), or over the
// only step when just one was logged. `what` names the source in errors.
// Throws tessera::Error (invalid argument) naming `what` and the line when a
// line is not JSON or lacks step, step_seconds, comm_bytes or memory, and
// when there is no line at all.
StrategyMeasure summarize_metrics(std::istream& in, const std::string& what);

// The same for a file. Throws tessera::Error naming the file when it is
// missing (the run wrote none), not a regular file, larger than 64 MiB or
// unreadable.
StrategyMeasure summarize_metrics_file(const std::filesystem::path& file);

}  // namespace tessera::cli

// What rank 0 tells the user while a run trains: one line per log step, a
// progress bar on a terminal, the metrics file (JSON lines) and the
// summary at the end.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "tessera/core/memory.hpp"
#include "tessera/core/train/trainer.hpp"

namespace tessera::train {

// One log line: "step 20/200 | loss 3.2145 | lr 3.00e-04 | 12.3k tok/s |
// step 85.2 ms | comm wait 3.1% | mem MiB r0 1.2/1.5 r1 ...". Memory is
// current/peak MiB of every rank (more than 8 ranks: the largest peak).
// `sequence`: report tokens/s rather than samples/s.
std::string format_step_line(const StepMetrics& metrics, int64_t total_steps, bool sequence);

// One metrics object as compact JSON (no newline): every StepMetrics field
// (bubble, bubble_cpu and bubble_formula only when a pipeline reported them),
// and "memory": [{"rank", "current": {category: bytes}, "peak": {...},
// "total_current", "total_peak"}] per rank.
std::string metrics_json(const StepMetrics& metrics);

// What the summary reports.
struct RunSummary {
  int64_t first_step = 1;
  int64_t last_step = 0;
  double final_loss = 0;
  double final_loss_mean = 0;             // over the last log line's steps
  int64_t final_window_steps = 0;         // how many; the mean is shown when > 1
  double mean_step_seconds = 0;           // the slowest rank's
  std::vector<double> rank_step_seconds;  // each rank's own mean step
  double samples_per_second = 0;
  double tokens_per_second = 0;  // sequence models; 0 otherwise
  double comm_wait_share = 0;
  double model_flops_per_second = 0;  // per rank; 0: unknown
  double mfu = 0;                     // of the measured sgemm rate; 0: not measured
  std::vector<MemoryStats> memory;    // per rank; peaks are reported
  std::filesystem::path checkpoint;   // empty: none written
};

// The summary lines: steps, final loss, mean step time, throughput, comm
// wait share, a table of peak MiB per rank and category, the checkpoint.
std::string format_summary(const RunSummary& summary);

struct RunLogOptions {
  std::ostream* out = nullptr;  // nullptr: the "train" logger at info
  bool progress = false;        // progress bar on stderr
  std::string metrics_path;     // empty: no metrics file
  bool append_metrics = false;  // resuming: keep the lines already there
  int64_t total_steps = 0;      // run.steps
  bool sequence = false;        // tokens/s rather than samples/s
};

// Rank 0's reporter. Not thread-safe: one rank uses it.
class RunLog {
 public:
  // Opens (creating parent directories) the metrics file. Throws
  // tessera::Error naming the path and strerror when it cannot be opened.
  explicit RunLog(RunLogOptions options);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  // A plain message line (the progress bar is cleared first).
  void message(const std::string& line);
  // After every step: redraws the progress bar (at most ~10 times a second,
  // and always for the last step).
  void step_done(int64_t step);
  // A log step: the line, and one metrics line written to the file (no
  // user-space buffer). Throws tessera::Error naming the metrics file and
  // strerror when writing it fails.
  void logged(const StepMetrics& metrics);
  // The end of the run: clears the bar and prints the summary.
  void summary(const RunSummary& summary);

 private:
  void clear_progress();
  void emit(const std::string& text);

  RunLogOptions options_;
  int metrics_fd_ = -1;    // the metrics file, -1 without one
  double last_loss_ = -1;  // < 0: none logged yet
  bool bar_shown_ = false;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_draw_{};
  int64_t steps_seen_ = 0;
};

}  // namespace tessera::train

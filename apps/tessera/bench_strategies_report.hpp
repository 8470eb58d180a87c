// `tessera bench strategies`: the table (one row per strategy, printed as
// each finishes) and the CSV file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "bench_strategies_metrics.hpp"
#include "table.hpp"

namespace tessera::cli {

// What the header lines and the CSV's leading columns say about the run.
struct StrategiesHeader {
  std::string model;                // "gpt"
  int64_t parameters = 0;           // Ψ: distinct parameter elements
  int world_size = 0;               // ranks (threads of each child)
  std::string backend;              // its name
  int64_t global_batch = 0;         // examples per step
  int64_t steps = 0;                // steps each strategy runs
  std::string config_strategy;      // the config's [strategy] name
  bool config_has_options = false;  // its [strategy.options] is not empty
  std::vector<std::string> notes;   // extra "# " lines (e.g. a clamped warm-up)
  int64_t launcher_rss_kib = 0;     // this process's peak RSS before the first child
  std::string csv_path;             // empty: no CSV
  std::size_t label_width = 0;      // the longest --strategies entry: the first column's width
};

// One strategy's outcome.
struct StrategyRow {
  std::string strategy;
  bool ok = false;
  StrategyMeasure measure;  // valid when ok
  int64_t max_rss_kib = 0;  // the child's ru_maxrss; 0 when it never ran
};

// Streams the table to `out` and, with a CSV path, the same rows to the
// file (bytes rather than MiB there). The constructor opens the CSV file
// and throws tessera::Error naming it when it cannot be written, before any
// output. Not thread-safe.
class StrategiesReporter {
 public:
  StrategiesReporter(StrategiesHeader header, std::ostream& out);

  // The "# " lines that explain the columns, and the title line.
  void begin();
  // One row: the numbers, or "failed" and dashes.
  void row(const StrategyRow& row);

  // The cells of a row as printed (exposed for tests).
  [[nodiscard]] std::vector<std::string> cells(const StrategyRow& row) const;

 private:
  StrategiesHeader header_;
  std::ostream& out_;
  TextTable table_;
  std::optional<std::ofstream> csv_;
};

}  // namespace tessera::cli

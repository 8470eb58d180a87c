// Output of `tessera bench collectives`: a header naming the run and the
// memcpy rate measured before the table, one row per size streamed as it
// completes, the busbw / memcpy ratio after the table, and optionally the
// same rows as CSV. With --compare-raw (spec.compare_raw) every row, table
// and CSV alike, gains the raw call's time, the ratio tessera / raw, the
// overhead (tessera - raw, microseconds) and the raw result's #wrong, and
// the ratio at the yardstick size is printed after the table.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "bench_launch.hpp"
#include "memcpy_rate.hpp"
#include "table.hpp"

namespace tessera::cli {

// What the header describes besides the plan.
struct BenchHeader {
  std::string backend;
  BenchSpec spec;
  double timeout_s = 60.0;
  std::string csv_path;  // empty: no CSV
};

// Size whose busbw is compared with the memcpy rate: 16 MiB if it ran,
// otherwise the largest size.
inline constexpr uint64_t kRatioBytes = uint64_t{16} << 20;

// Writes to `out` (and the CSV file). begin() measures the memcpy rate on
// the calling thread for the plan's largest size and opens the CSV file;
// failing to open it throws tessera::Error naming the path.
class TextBenchReporter final : public BenchReporter {
 public:
  TextBenchReporter(BenchHeader header, std::ostream& out);

  void begin(const BenchPlan& plan, bool thread_ranks) override;
  void row(const BenchRow& row) override;
  void end() override;

  // Mismatching elements over all rows, through the plugin.
  [[nodiscard]] uint64_t total_wrong() const noexcept { return total_wrong_; }
  // Mismatching elements over all rows, through the raw call (0 without
  // --compare-raw).
  [[nodiscard]] uint64_t raw_wrong() const noexcept { return raw_wrong_; }
  [[nodiscard]] const std::vector<BenchRow>& rows() const noexcept { return rows_; }

 private:
  void print_header(const BenchPlan& plan, bool thread_ranks);
  void open_csv();

  BenchHeader header_;
  std::ostream& out_;
  TextTable table_;
  int ranks_ = 0;
  MemcpyRate memcpy_;
  std::optional<std::ofstream> csv_;
  std::vector<BenchRow> rows_;
  uint64_t total_wrong_ = 0;
  uint64_t raw_wrong_ = 0;
};

}  // namespace tessera::cli

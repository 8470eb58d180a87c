// The `bench collectives --compare-raw` output: the extra table and CSV
// columns (raw time, tessera/raw ratio, overhead, raw #wrong), the summary
// after the table, and the unchanged output without the flag. Rows are
// given to the reporter directly, so every number printed is known.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_report.hpp"

namespace tessera::cli {
namespace {

// A plan of one 1 KiB size over 2 ranks.
BenchPlan one_size_plan() {
  BenchPlan plan;
  plan.ranks = 2;
  plan.unit = 4;
  plan.sizes = {PlannedSize{1024, 1024}};
  return plan;
}

// A compared row: 30 us through the plugin, 20 us through the raw call.
BenchRow compared_row(uint64_t raw_wrong) {
  BenchRow row;
  row.bytes = 1024;
  row.count = 256;
  row.time_us = 30.0;
  row.algbw_gbps = 1024.0 / 30.0 / 1e3;
  row.busbw_gbps = row.algbw_gbps;
  row.compared_raw = true;
  row.raw_time_us = 20.0;
  row.raw_wrong = raw_wrong;
  return row;
}

BenchSpec compare_spec() {
  BenchSpec spec;
  spec.compare_raw = true;
  return spec;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Whitespace-separated cells of a table line.
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::istringstream in(line);
  for (std::string cell; in >> cell;) cells.push_back(cell);
  return cells;
}

// The table's title and rows: the lines that do not start with '#'.
std::vector<std::string> table_lines(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& line : lines_of(text)) {
    if (!line.empty() && line[0] != '#') out.push_back(line);
  }
  return out;
}

std::filesystem::path csv_path(const std::string& name) {
  return std::filesystem::path(::testing::TempDir()) / ("tessera_bench_raw_" + name + ".csv");
}

TEST(BenchRawReport, TableHasRawTimeRatioOverheadAndRawWrong) {
  std::ostringstream out;
  TextBenchReporter reporter(BenchHeader{"fake", compare_spec(), 60.0, ""}, out);
  reporter.begin(one_size_plan(), false);
  reporter.row(compared_row(0));
  reporter.end();

  const auto table = table_lines(out.str());
  ASSERT_EQ(table.size(), 2U) << out.str();
  const auto title = cells_of(table[0]);
  ASSERT_EQ(title.size(), 12U) << table[0];
  EXPECT_EQ(title[8], "raw(us)");
  EXPECT_EQ(title[9], "tessera/raw");
  EXPECT_EQ(title[10], "overhead(us)");
  EXPECT_EQ(title[11], "#wrong(raw)");
  const auto row = cells_of(table[1]);
  ASSERT_EQ(row.size(), 12U) << table[1];
  EXPECT_EQ(row[4], "30.00");
  EXPECT_EQ(row[8], "20.00");
  EXPECT_EQ(row[9], "1.500");
  EXPECT_EQ(row[10], "10.00");
  EXPECT_EQ(row[11], "0");

  const std::string text = out.str();
  EXPECT_NE(text.find("# compare-raw: "), std::string::npos) << text;
  EXPECT_NE(text.find("# tessera / raw at 1024 B: 30.00 / 20.00 us = 1.500 (overhead 10.00 us)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# #wrong total: 0 (tessera 0, raw 0) (OK)"), std::string::npos) << text;
  EXPECT_EQ(reporter.total_wrong(), 0U);
  EXPECT_EQ(reporter.raw_wrong(), 0U);
}

TEST(BenchRawReport, RawWrongIsCountedApart) {
  std::ostringstream out;
  TextBenchReporter reporter(BenchHeader{"fake", compare_spec(), 60.0, ""}, out);
  reporter.begin(one_size_plan(), false);
  reporter.row(compared_row(7));
  reporter.end();
  EXPECT_EQ(reporter.total_wrong(), 0U);
  EXPECT_EQ(reporter.raw_wrong(), 7U);
  EXPECT_NE(out.str().find("# #wrong total: 7 (tessera 0, raw 7)\n"), std::string::npos)
      << out.str();
}

TEST(BenchRawReport, ZeroRawTimeGivesInfiniteRatio) {
  std::ostringstream out;
  TextBenchReporter reporter(BenchHeader{"fake", compare_spec(), 60.0, ""}, out);
  reporter.begin(one_size_plan(), false);
  BenchRow row = compared_row(0);
  row.raw_time_us = 0.0;
  reporter.row(row);
  const auto cells = cells_of(table_lines(out.str()).at(1));
  ASSERT_EQ(cells.size(), 12U);
  EXPECT_EQ(cells[9], "inf");
  EXPECT_EQ(cells[10], "30.00");
}

TEST(BenchRawReport, CsvHasTheSameRawColumns) {
  const auto path = csv_path("compare");
  std::filesystem::remove(path);
  {
    std::ostringstream out;
    TextBenchReporter reporter(BenchHeader{"fake", compare_spec(), 60.0, path.string()}, out);
    reporter.begin(one_size_plan(), false);
    reporter.row(compared_row(2));
    reporter.end();
  }
  std::ifstream in(path);
  std::string header;
  std::string row;
  ASSERT_TRUE(std::getline(in, header));
  ASSERT_TRUE(std::getline(in, row));
  EXPECT_EQ(header,
            "backend,ranks,op,size_bytes,count,type,redop,device,time_us,algbw_gbps,busbw_gbps,"
            "wrong,memcpy_gbps,raw_time_us,tessera_raw_ratio,overhead_us,raw_wrong");
  EXPECT_EQ(row.rfind("fake,2,allreduce,1024,256,f32,sum,cpu,30.000,", 0), 0U) << row;
  EXPECT_TRUE(row.ends_with(",20.000,1.500,10.000,2")) << row;
  std::filesystem::remove(path);
}

TEST(BenchRawReport, WithoutTheFlagTheOutputHasNoRawColumns) {
  const auto path = csv_path("plain");
  std::filesystem::remove(path);
  std::ostringstream out;
  {
    TextBenchReporter reporter(BenchHeader{"fake", BenchSpec{}, 60.0, path.string()}, out);
    reporter.begin(one_size_plan(), false);
    BenchRow row = compared_row(0);
    row.compared_raw = false;
    reporter.row(row);
    reporter.end();
  }
  const auto table = table_lines(out.str());
  ASSERT_EQ(table.size(), 2U);
  EXPECT_EQ(cells_of(table[0]).size(), 8U) << table[0];
  EXPECT_EQ(cells_of(table[1]).size(), 8U) << table[1];
  EXPECT_EQ(out.str().find("raw"), std::string::npos) << out.str();
  std::ifstream in(path);
  std::string header;
  ASSERT_TRUE(std::getline(in, header));
  EXPECT_TRUE(header.ends_with(",wrong,memcpy_gbps")) << header;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tessera::cli

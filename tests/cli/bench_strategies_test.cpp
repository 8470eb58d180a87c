// `tessera bench strategies`: the metrics summary, the list and override
// helpers, the row cells, and the built executable run on a tiny mlp under
// ddp and zero3 with its CSV read back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_strategies.hpp"
#include "bench_strategies_child.hpp"
#include "bench_strategies_metrics.hpp"
#include "bench_strategies_report.hpp"
#include "cli_error.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

// A metrics line as `tessera train` writes it, two ranks.
std::string line(int step, double seconds, long bytes, long params0, long params1, long total) {
  std::ostringstream s;
  s << R"({"comm_bytes":)" << bytes << R"(,"comm_wait_share":0.1,"grad_norm":1.0,"loss":2.0,)"
    << R"("lr":0.001,"memory":[)"
    << R"({"current":{"params":1},"peak":{"activations":7,"comm":3,"grads":20,"optimizer":40,)"
    << R"("other":0,"params":)" << params0 << R"(},"rank":0,"total_current":1,"total_peak":)"
    << total << "},"
    << R"({"current":{"params":1},"peak":{"activations":9,"comm":1,"grads":10,"optimizer":80,)"
    << R"("other":5,"params":)" << params1 << R"(},"rank":1,"total_current":1,"total_peak":)"
    << total - 1 << "}"
    << R"(],"samples_per_second":10.0,"step":)" << step << R"(,"step_seconds":)" << seconds
    << R"(,"tokens_per_second":0.0})";
  return s.str();
}

TEST(BenchStrategiesMetrics, AveragesTheStepsAfterTheFirstAndTakesTheLastPeaks) {
  std::istringstream in(line(1, 1.0, 100, 5, 6, 50) + "\n" + line(2, 0.2, 200, 5, 6, 60) + "\n" +
                        line(3, 0.4, 400, 30, 6, 70) + "\n\n");
  const StrategyMeasure m = summarize_metrics(in, "test");
  EXPECT_EQ(m.lines, 3);
  EXPECT_EQ(m.first_averaged, 2);
  EXPECT_EQ(m.last_averaged, 3);
  EXPECT_DOUBLE_EQ(m.step_seconds, 0.3);
  EXPECT_DOUBLE_EQ(m.sent_bytes, 300.0);
  EXPECT_EQ(m.ranks, 2);
  EXPECT_EQ(m.peak[static_cast<int>(BenchMemColumn::kParams)], 30);
  EXPECT_EQ(m.peak[static_cast<int>(BenchMemColumn::kGrads)], 20);
  EXPECT_EQ(m.peak[static_cast<int>(BenchMemColumn::kOptimizer)], 80);
  EXPECT_EQ(m.peak[static_cast<int>(BenchMemColumn::kComm)], 3);
  EXPECT_EQ(m.peak[static_cast<int>(BenchMemColumn::kActivations)], 9);
  EXPECT_EQ(m.total_peak, 70);
}

// A pipeline's lines carry its bubble: averaged over the same steps.
TEST(BenchStrategiesMetrics, AveragesAPipelinesBubble) {
  const auto with_bubble = [](int step, double wall, double cpu) {
    return "{\"bubble\":" + std::to_string(wall) + ",\"bubble_cpu\":" + std::to_string(cpu) +
           ",\"bubble_formula\":0.25," + line(step, 0.1, 10, 1, 1, 5).substr(1);
  };
  std::istringstream in(with_bubble(1, 0.9, 0.9) + "\n" + with_bubble(2, 0.4, 0.3) + "\n" +
                        with_bubble(3, 0.2, 0.25) + "\n");
  const StrategyMeasure m = summarize_metrics(in, "test");
  EXPECT_DOUBLE_EQ(m.bubble, 0.3);
  EXPECT_DOUBLE_EQ(m.bubble_cpu, 0.275);
  EXPECT_DOUBLE_EQ(m.bubble_formula, 0.25);
  std::istringstream plain(line(1, 0.5, 64, 1, 2, 9) + "\n");
  EXPECT_EQ(summarize_metrics(plain, "test").bubble_formula, 0.0);
}

TEST(BenchStrategiesMetrics, OneStepIsUsedAsItIs) {
  std::istringstream in(line(1, 0.5, 64, 1, 2, 9) + "\n");
  const StrategyMeasure m = summarize_metrics(in, "test");
  EXPECT_EQ(m.first_averaged, 1);
  EXPECT_DOUBLE_EQ(m.step_seconds, 0.5);
  EXPECT_DOUBLE_EQ(m.sent_bytes, 64.0);
}

TEST(BenchStrategiesMetrics, RejectsBrokenInputNamingTheLine) {
  std::istringstream broken(line(1, 0.5, 64, 1, 2, 9) + "\n{not json\n");
  try {
    (void)summarize_metrics(broken, "metrics file 'm.jsonl'");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics file 'm.jsonl' line 2"), std::string::npos)
        << e.what();
  }
  std::istringstream missing(R"({"step":1,"step_seconds":0.1})");
  EXPECT_THROW((void)summarize_metrics(missing, "m"), Error);
  std::istringstream empty("\n");
  EXPECT_THROW((void)summarize_metrics(empty, "m"), Error);
  EXPECT_THROW((void)summarize_metrics_file("/nonexistent/metrics.jsonl"), Error);
}

TEST(BenchStrategiesArgs, ParsesTheListAndRefusesEmptyOrRepeatedNames) {
  EXPECT_EQ(parse_strategy_list("ddp,zero1,zero3"),
            (std::vector<std::string>{"ddp", "zero1", "zero3"}));
  EXPECT_EQ(parse_strategy_list("fsdp"), (std::vector<std::string>{"fsdp"}));
  EXPECT_THROW((void)parse_strategy_list(""), UsageError);
  EXPECT_THROW((void)parse_strategy_list("ddp,,zero1"), UsageError);
  EXPECT_THROW((void)parse_strategy_list("ddp,"), UsageError);
  EXPECT_THROW((void)parse_strategy_list("ddp,zero1,ddp"), UsageError);
}

TEST(BenchStrategiesArgs, OptionsOfTheConfigStrategyAreDroppedForTheOthers) {
  const auto own = child_overrides("ddp", "ddp", 5, 2, "/m/ddp.jsonl");
  const auto other = child_overrides("zero3", "ddp", 5, 8, "/m/z.jsonl");
  const auto has = [](const std::vector<std::string>& list, const std::string& item) {
    return std::find(list.begin(), list.end(), item) != list.end();
  };
  EXPECT_TRUE(has(own, "strategy.name=\"ddp\""));
  EXPECT_FALSE(has(own, "strategy.options={}"));
  EXPECT_FALSE(has(own, "optimizer.warmup_steps=5"));
  EXPECT_TRUE(has(own, "run.metrics=\"/m/ddp.jsonl\""));
  EXPECT_TRUE(has(own, "run.log_every=1"));
  EXPECT_TRUE(has(own, "run.steps=5"));
  EXPECT_TRUE(has(own, "checkpoint.dir=\"\""));
  EXPECT_TRUE(has(other, "strategy.name=\"zero3\""));
  EXPECT_TRUE(has(other, "strategy.options={}"));
  EXPECT_TRUE(has(other, "optimizer.warmup_steps=5"));
}

// NAME:KEY=VALUE entries: the plugin, and options set after the reset of
// the config's options; bare words become TOML strings.
TEST(BenchStrategiesArgs, EntriesSetOptionsOfTheirRun) {
  const StrategyEntry plain = parse_strategy_entry("ddp");
  EXPECT_EQ(plain.name, "ddp");
  EXPECT_TRUE(plain.options.empty());
  const StrategyEntry e = parse_strategy_entry("pipeline:schedule=interleaved:virtual_stages=2");
  EXPECT_EQ(e.name, "pipeline");
  ASSERT_EQ(e.options.size(), 2U);
  const auto o = child_overrides(e.name, "ddp", 5, 2, "/m/p.jsonl", e.options);
  ASSERT_GE(o.size(), 3U);
  const auto reset = std::find(o.begin(), o.end(), "strategy.options={}");
  const auto schedule = std::find(o.begin(), o.end(), "strategy.options.schedule=\"interleaved\"");
  const auto chunks = std::find(o.begin(), o.end(), "strategy.options.virtual_stages=2");
  ASSERT_NE(reset, o.end());
  ASSERT_NE(schedule, o.end());
  ASSERT_NE(chunks, o.end());
  EXPECT_LT(reset, schedule);
  EXPECT_EQ(parse_strategy_list("pipeline:schedule=gpipe,pipeline:schedule=1f1b").size(), 2U);
  for (const char* bad : {"pipeline:schedule", "pipeline:=1", "pipeline:stages=", "pipeline:"}) {
    try {
      (void)parse_strategy_entry(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UsageError& err) {
      EXPECT_NE(std::string(err.what()).find("is not KEY=VALUE"), std::string::npos) << err.what();
    }
  }
}

TEST(BenchStrategiesReport, AFailedRowSaysSoAndHasNoNumbers) {
  std::ostringstream out;
  StrategiesReporter reporter(StrategiesHeader{}, out);
  const auto cells = reporter.cells(StrategyRow{"zero2", false, {}, 0});
  ASSERT_EQ(cells.size(), 14U);
  EXPECT_EQ(cells[0], "zero2");
  EXPECT_EQ(cells[1], "failed");
  EXPECT_TRUE(std::all_of(cells.begin() + 2, cells.end(), [](const auto& c) { return c == "-"; }));
}

// Rows are streamed under a title printed first: a long entry widens the
// first column from the start, so every row stays under its title.
TEST(BenchStrategiesReport, LongEntriesKeepTheColumnsAligned) {
  const std::string label = "pipeline:schedule=interleaved:virtual_stages=2";
  StrategiesHeader header;
  header.label_width = label.size();
  std::ostringstream out;
  StrategiesReporter reporter(header, out);
  reporter.begin();
  reporter.row(StrategyRow{label, false, {}, 0});
  reporter.row(StrategyRow{"ddp", false, {}, 0});
  std::vector<std::string> lines;
  std::istringstream in(out.str());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_GE(lines.size(), 3U);
  const std::string& title = lines[lines.size() - 3];
  const auto end_of = [](const std::string& line, const std::string& word) {
    const std::size_t at = line.find(word);
    return at == std::string::npos ? at : at + word.size();
  };
  EXPECT_EQ(end_of(lines[lines.size() - 2], "failed"), end_of(title, "step(ms)")) << out.str();
  EXPECT_EQ(end_of(lines.back(), "failed"), end_of(title, "step(ms)")) << out.str();
}

// The CSV rows of a run, by strategy, as column -> cell.
std::map<std::string, std::map<std::string, std::string>> read_csv(const fs::path& file) {
  std::ifstream in(file);
  std::string text;
  std::vector<std::string> header;
  std::map<std::string, std::map<std::string, std::string>> rows;
  const auto split = [](const std::string& l) {
    std::vector<std::string> cells;
    std::stringstream s(l);
    std::string cell;
    while (std::getline(s, cell, ',')) cells.push_back(cell);
    if (!l.empty() && l.back() == ',') cells.emplace_back();
    return cells;
  };
  while (std::getline(in, text)) {
    const auto cells = split(text);
    if (header.empty()) {
      header = cells;
      continue;
    }
    EXPECT_EQ(cells.size(), header.size()) << text;
    auto& row = rows[cells.at(0)];
    for (size_t i = 0; i < std::min(cells.size(), header.size()); ++i) row[header[i]] = cells[i];
  }
  return rows;
}

double number(const std::map<std::string, std::string>& row, const std::string& key) {
  return std::stod(row.at(key));
}

TEST(BenchStrategiesRun, DdpAndZero3OnATinyMlp) {
  const fs::path dir = fs::path(::testing::TempDir()) / "bench_strategies_run";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path csv = dir / "rows.csv";
  const ChildOutcome run =
      run_child({TESSERA_CLI_EXE, "bench", "strategies", TESSERA_CLI_MLP_CONFIG, "--strategies",
                 "ddp,zero3,pipeline:schedule=gpipe", "--steps", "3", "--csv", csv.string()},
                dir / "stdout.txt", dir / "stderr.txt");
  ASSERT_TRUE(run.ok()) << run.describe() << "\n" << file_tail(dir / "stderr.txt", 30);

  const auto rows = read_csv(csv);
  ASSERT_EQ(rows.size(), 3U);
  // The pipeline row has its bubble next to gpipe's formula, 2 stages and
  // one micro-batch: (p-1)/(m+p-1) = 1/2; the others have none.
  const auto& pipeline = rows.at("pipeline:schedule=gpipe");
  EXPECT_EQ(pipeline.at("status"), "ok");
  EXPECT_DOUBLE_EQ(number(pipeline, "bubble_formula"), 0.5);
  EXPECT_GT(number(pipeline, "bubble"), 0.0);
  EXPECT_LE(number(pipeline, "bubble"), 1.0);
  EXPECT_GT(number(pipeline, "bubble_cpu"), 0.0);
  EXPECT_LE(number(pipeline, "bubble_cpu"), 1.0);
  const auto& ddp = rows.at("ddp");
  const auto& zero3 = rows.at("zero3");
  for (const auto* row : {&ddp, &zero3}) {
    EXPECT_EQ(number(*row, "bubble_formula"), 0.0);
    EXPECT_EQ(row->at("status"), "ok");
    EXPECT_EQ(row->at("ranks"), "2");
    EXPECT_EQ(row->at("parameters"), "676");  // 16*32 + 32 + 32*4 + 4
    EXPECT_GT(number(*row, "step_ms"), 0.0);
    EXPECT_GT(number(*row, "peak_rss_bytes"), 0.0);
    EXPECT_GE(number(*row, "total_bytes"), number(*row, "params_bytes") +
                                               number(*row, "grads_bytes") +
                                               number(*row, "optimizer_bytes"));
  }
  // ddp's allreduce sends about 2(N-1)/N = 1 parameter's worth of f32 per
  // parameter; zero3's extra parameter gathers send more.
  const double ddp_ratio = number(ddp, "sent_per_4psi");
  EXPECT_GT(ddp_ratio, 0.9);
  EXPECT_LT(ddp_ratio, 1.1);
  EXPECT_NEAR(number(ddp, "sent_bytes_per_step") / (4.0 * 676), ddp_ratio, 1e-5);
  EXPECT_GT(number(zero3, "sent_per_4psi"), ddp_ratio);
  // ddp holds every parameter (4P bytes); zero3 about half on each of 2 ranks.
  EXPECT_EQ(number(ddp, "params_bytes"), 4.0 * 676);
  EXPECT_LT(number(zero3, "params_bytes"), number(ddp, "params_bytes"));

  const std::string out = file_tail(dir / "stdout.txt", 100);
  EXPECT_NE(out.find("# bench strategies: model mlp (676 parameters = P), 2 ranks"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("apply to 'ddp' only"), std::string::npos) << out;
  EXPECT_NE(out.find("optimizer.warmup_steps 5 cut to the 3 steps run"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::cli

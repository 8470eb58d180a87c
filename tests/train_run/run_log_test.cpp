// The reporter's text: log lines, metrics JSON, summary, checkpoint names.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "run_fixture.hpp"
#include "tessera/core/train/checkpointing.hpp"
#include "tessera/core/train/run_log.hpp"

namespace tessera::test {
namespace {

#define EXPECT_MENTIONS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

train::StepMetrics sample_metrics(int ranks) {
  train::StepMetrics m;
  m.step = 20;
  m.loss = 3.21456;
  m.grad_norm = 0.75;
  m.lr = 3e-4;
  m.step_seconds = 0.0852;
  m.comm_wait_share = 0.031;
  m.samples_per_second = 187.8;
  m.tokens_per_second = 12019.2;
  m.comm_bytes = 4096;
  for (int r = 0; r < ranks; ++r) {
    MemoryStats s;
    s.current[TESSERA_MEM_PARAMS] = 1 << 20;
    s.peak[TESSERA_MEM_PARAMS] = 1 << 20;
    s.peak[TESSERA_MEM_OPTIMIZER] = 2 << 20;
    s.total_current = 1 << 20;
    s.total_peak = (3 << 20) + r * (1 << 20);
    m.memory.push_back(s);
  }
  return m;
}

TEST(RunLog, StepLineHasEveryNumber) {
  const std::string line = train::format_step_line(sample_metrics(2), 200, true);
  EXPECT_EQ(line,
            "step  20/200 | loss 3.2146 | lr 3.00e-04 | 12.0k tok/s | step 85.2 ms | comm wait "
            "3.1% | mem MiB r0 1.0/3.0 r1 1.0/4.0");
  EXPECT_MENTIONS(train::format_step_line(sample_metrics(1), 200, false), "188 samples/s");
  // Model FLOP/s per rank, and MFU once the sgemm rate is measured.
  train::StepMetrics m = sample_metrics(1);
  m.model_flops_per_second = 38.47e9;
  EXPECT_MENTIONS(train::format_step_line(m, 200, true),
                  "comm wait 3.1% | 38.5 GFLOP/s/rank | mem MiB");
  m.mfu = 0.4912;
  EXPECT_MENTIONS(train::format_step_line(m, 200, true),
                  "comm wait 3.1% | 38.5 GFLOP/s/rank, MFU 49.1% | mem MiB");
  // Many ranks: only the largest peak.
  EXPECT_MENTIONS(train::format_step_line(sample_metrics(12), 200, true),
                  "mem MiB max r11 1.0/14.0 of 12 ranks");
}

TEST(RunLog, MetricsJsonHasEveryField) {
  const auto j = nlohmann::json::parse(train::metrics_json(sample_metrics(2)));
  EXPECT_EQ(j.at("step"), 20);
  EXPECT_DOUBLE_EQ(j.at("loss").get<double>(), 3.21456);
  EXPECT_TRUE(j.contains("loss_mean"));
  EXPECT_DOUBLE_EQ(j.at("grad_norm").get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j.at("lr").get<double>(), 3e-4);
  EXPECT_DOUBLE_EQ(j.at("step_seconds").get<double>(), 0.0852);
  EXPECT_DOUBLE_EQ(j.at("comm_wait_share").get<double>(), 0.031);
  EXPECT_DOUBLE_EQ(j.at("samples_per_second").get<double>(), 187.8);
  EXPECT_DOUBLE_EQ(j.at("tokens_per_second").get<double>(), 12019.2);
  EXPECT_EQ(j.at("comm_bytes"), 4096);
  EXPECT_DOUBLE_EQ(j.at("model_flops_per_second").get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j.at("mfu").get<double>(), 0.0);
  ASSERT_EQ(j.at("memory").size(), 2U);
  EXPECT_EQ(j.at("memory")[1].at("rank"), 1);
  EXPECT_EQ(j.at("memory")[1].at("peak").at("optimizer"), 2 << 20);
  EXPECT_EQ(j.at("memory")[1].at("current").at("params"), 1 << 20);
  EXPECT_EQ(j.at("memory")[1].at("total_peak"), 4 << 20);
  for (const char* category : {"params", "grads", "optimizer", "comm", "activations", "other"}) {
    EXPECT_TRUE(j.at("memory")[0].at("peak").contains(category)) << category;
  }
}

// A pipeline's bubble (wall and CPU clock) shows in the step line and the
// metrics next to its formula; without one (all 0) neither mentions it.
TEST(RunLog, PipelineBubbleShowsNextToItsFormula) {
  train::StepMetrics m = sample_metrics(1);
  EXPECT_EQ(train::format_step_line(m, 200, true).find("bubble"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(train::metrics_json(m)).contains("bubble"));
  m.bubble = 0.25;
  m.bubble_cpu = 0.21;
  m.bubble_formula = 0.2;
  EXPECT_MENTIONS(train::format_step_line(m, 200, true),
                  "comm wait 3.1% | bubble 25.0% (cpu clock 21.0%, formula 20.0%) | mem MiB");
  const auto j = nlohmann::json::parse(train::metrics_json(m));
  EXPECT_DOUBLE_EQ(j.at("bubble").get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j.at("bubble_cpu").get<double>(), 0.21);
  EXPECT_DOUBLE_EQ(j.at("bubble_formula").get<double>(), 0.2);
}

// A hierarchical reduction's bytes across nodes show in the step line only
// when there are any; the metrics always carry them.
TEST(RunLog, CrossNodeBytesShowWhenSent) {
  train::StepMetrics m = sample_metrics(1);
  EXPECT_EQ(train::format_step_line(m, 200, true).find("cross-node"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(train::metrics_json(m)).at("comm_bytes_cross_node"), 0);
  m.comm_bytes_cross_node = 3 << 19;
  EXPECT_MENTIONS(train::format_step_line(m, 200, true),
                  "comm wait 3.1% | cross-node 1.50 MiB | mem MiB");
  EXPECT_EQ(nlohmann::json::parse(train::metrics_json(m)).at("comm_bytes_cross_node"), 3 << 19);
}

TEST(RunLog, SummaryNamesStepsLossThroughputMemoryAndCheckpoint) {
  train::RunSummary s;
  s.first_step = 11;
  s.last_step = 20;
  s.final_loss = 1.5;
  s.mean_step_seconds = 0.01;
  s.samples_per_second = 1600;
  s.tokens_per_second = 51200;
  s.comm_wait_share = 0.25;
  s.model_flops_per_second = 2.5e9;
  s.mfu = 0.125;
  s.memory = sample_metrics(2).memory;
  s.checkpoint = "runs/ck/step-00000020/model.safetensors";
  const std::string text = train::format_summary(s);
  EXPECT_MENTIONS(text, "summary: steps 11-20 (10 run), final loss 1.5000\n");
  s.final_loss_mean = 1.625;
  s.final_window_steps = 4;  // run.log_every = 4: the last line's window, steps 17-20
  EXPECT_MENTIONS(train::format_summary(s), "final loss 1.5000 (mean 1.6250 over steps 17-20)\n");
  EXPECT_MENTIONS(text,
                  "mean step 10.0 ms, 51.2k tok/s, comm wait 25.0% | 2.5 GFLOP/s/rank, MFU 12.5%");
  EXPECT_MENTIONS(text, "peak memory (MiB)");
  EXPECT_MENTIONS(text, "optimizer");
  EXPECT_MENTIONS(text, "rank 1");
  EXPECT_MENTIONS(text, "checkpoint: runs/ck/step-00000020/model.safetensors");
}

// Ranks whose own mean steps differ by more than 20% are named, the
// fastest and the slowest; ranks that step together add no line.
TEST(RunLog, SummaryNamesRanksWhoseStepsDiffer) {
  train::RunSummary s;
  s.first_step = 1;
  s.last_step = 10;
  s.mean_step_seconds = 0.05;
  s.rank_step_seconds = {0.05, 0.05, 0.002};
  EXPECT_MENTIONS(train::format_summary(s),
                  "\n  ranks' mean steps differ: fastest rank 2 2.0 ms (500 steps/s), slowest "
                  "rank 0 50.0 ms (20 steps/s)");
  s.rank_step_seconds = {0.05, 0.045, 0.048};
  EXPECT_EQ(train::format_summary(s).find("differ"), std::string::npos);
}

TEST(RunLog, WritesLinesToTheStreamAndMetricsToTheFile) {
  ScratchDir dir;
  std::ostringstream out;
  train::RunLogOptions options;
  options.out = &out;
  options.metrics_path = (dir / "sub" / "m.jsonl").string();
  options.total_steps = 200;
  {
    train::RunLog log(options);
    log.message("hello");
    log.logged(sample_metrics(1));
    log.step_done(20);
  }
  EXPECT_MENTIONS(out.str(), "hello\nstep  20/200 | loss 3.2146");
  const std::string file = read_text(dir / "sub" / "m.jsonl");
  EXPECT_EQ(file, train::metrics_json(sample_metrics(1)) + "\n");
  // Resuming appends.
  options.append_metrics = true;
  {
    train::RunLog log(options);
    log.logged(sample_metrics(1));
  }
  EXPECT_EQ(read_text(dir / "sub" / "m.jsonl"), file + file);
}

TEST(Checkpointing, DirectoryNames) {
  EXPECT_EQ(train::checkpoint_dir_name(0), "step-00000000");
  EXPECT_EQ(train::checkpoint_dir_name(1234), "step-00001234");
  EXPECT_EQ(train::checkpoint_dir_name(123456789), "step-123456789");
  EXPECT_EQ(train::parse_checkpoint_dir_name("step-00001234"), 1234);
  EXPECT_EQ(train::parse_checkpoint_dir_name("step-123456789"), 123456789);
  EXPECT_FALSE(train::parse_checkpoint_dir_name("step-").has_value());
  EXPECT_FALSE(train::parse_checkpoint_dir_name("step-12a").has_value());
  EXPECT_FALSE(train::parse_checkpoint_dir_name("step--1").has_value());
  EXPECT_FALSE(train::parse_checkpoint_dir_name("step-99999999999999999999").has_value());
  EXPECT_FALSE(train::parse_checkpoint_dir_name("../step-1").has_value());
  EXPECT_FALSE(train::parse_checkpoint_dir_name("step-1/x").has_value());
}

TEST(Checkpointing, NoLatestFileMeansNothingToResume) {
  ScratchDir dir;
  EXPECT_FALSE(train::find_latest_checkpoint(dir.path()).has_value());
  EXPECT_FALSE(train::find_latest_checkpoint(dir / "absent").has_value());
  std::ofstream(dir / "latest") << "garbage\n";
  EXPECT_MENTIONS(error_of([&] { (void)train::find_latest_checkpoint(dir.path()); }),
                  "must hold a directory name like 'step-00000100', got 'garbage'");
}

}  // namespace
}  // namespace tessera::test

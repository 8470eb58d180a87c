// run_training end to end with the `none` strategy (one rank) and, where
// built, `ddp`: loss, logs, metrics file, micro-batches, initial weights and
// failures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numbers>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "run_fixture.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

using train::run_training;
using train::RunOptions;
using train::RunResult;

#define EXPECT_MENTIONS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(RunTraining, NoneLowersTheLossOfAnMlp) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  const auto metrics = dir / "logs" / "metrics.jsonl";
  const Config config = make_config(mlp_toml("none", 1, 30), {"run.metrics=" + metrics.string()});
  std::ostringstream out;
  RunOptions options;
  options.out = &out;
  const RunResult result = run_training(config, plugins(), options);

  EXPECT_EQ(result.first_step, 1);
  EXPECT_EQ(result.last_step, 30);
  ASSERT_EQ(result.logged.size(), 30U);
  const double first = result.logged.front().loss;
  const double last = result.logged.back().loss;
  EXPECT_GT(first, 1.0);  // about ln(4) at the start
  EXPECT_LT(last, 0.5 * first) << "the loss did not fall: " << first << " -> " << last;
  EXPECT_EQ(result.final_loss, last);
  EXPECT_GT(result.mean_step_seconds, 0.0);
  ASSERT_EQ(result.memory.size(), 1U);
  EXPECT_GT(result.memory[0].total_peak, 0);
  for (const auto& m : result.logged) {
    EXPECT_TRUE(std::isfinite(m.loss));
    EXPECT_GT(m.samples_per_second, 0.0);
    EXPECT_EQ(m.tokens_per_second, 0.0);
    EXPECT_EQ(m.memory.size(), 1U);
    // Warm-up none, cosine decay to 0 at the last step.
    if (m.step < 30) {
      EXPECT_GT(m.lr, 0.0) << m.step;
    }
  }
  EXPECT_EQ(result.logged.back().lr, 0.0);
  EXPECT_FLOAT_EQ(static_cast<float>(result.logged.front().lr),
                  static_cast<float>(0.01 * 0.5 * (1.0 + std::cos(std::numbers::pi / 30.0))));

  EXPECT_MENTIONS(out.str(), "libtessera_model_mlp.so), 212 parameters");
  EXPECT_MENTIONS(out.str(), "step 30/30 | loss ");
  EXPECT_MENTIONS(out.str(), "samples/s");
  EXPECT_MENTIONS(out.str(), "summary: steps 1-30 (30 run)");
  EXPECT_MENTIONS(out.str(), "peak memory (MiB)");

  const std::vector<std::string> json = lines_of(read_text(metrics));
  ASSERT_EQ(json.size(), 30U);
  for (size_t i = 0; i < json.size(); ++i) {
    const auto j = nlohmann::json::parse(json[i]);
    EXPECT_EQ(j.at("step").get<int64_t>(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(j.at("loss").get<double>(), result.logged[i].loss);
    for (const char* key : {"grad_norm", "lr", "step_seconds", "comm_wait_share",
                            "samples_per_second", "tokens_per_second", "comm_bytes"}) {
      EXPECT_TRUE(j.contains(key)) << key;
    }
    ASSERT_EQ(j.at("memory").size(), 1U);
    const auto& mem = j.at("memory")[0];
    EXPECT_EQ(mem.at("rank").get<int>(), 0);
    EXPECT_TRUE(mem.at("peak").contains("params"));
    EXPECT_TRUE(mem.at("current").contains("optimizer"));
    EXPECT_GT(mem.at("total_peak").get<int64_t>(), 0);
  }
}

// A log line's loss_mean is the mean of the global losses of the steps
// since the previous line (the last line's window may be shorter), and
// the summary names the last window.
TEST(RunTraining, LossMeanAveragesTheStepsSinceThePreviousLine) {
  TESSERA_REQUIRE_STRATEGY("none");
  RunOptions options;
  const RunResult every = run_training(make_config(mlp_toml("none", 1, 12)), plugins(), options);
  ASSERT_EQ(every.logged.size(), 12U);
  for (const auto& m : every.logged) {
    EXPECT_EQ(m.loss_mean, m.loss) << m.step;
    EXPECT_EQ(m.window_steps, 1) << m.step;
  }
  std::ostringstream out;
  options.out = &out;
  const RunResult windows =
      run_training(make_config(mlp_toml("none", 1, 12), {"run.log_every=5"}), plugins(), options);
  ASSERT_EQ(windows.logged.size(), 3U);  // steps 5, 10 and 12
  const std::pair<size_t, size_t> ranges[] = {{0, 5}, {5, 10}, {10, 12}};
  for (size_t w = 0; w < 3; ++w) {
    double sum = 0;
    for (size_t i = ranges[w].first; i < ranges[w].second; ++i) sum += every.logged[i].loss;
    const auto steps = static_cast<double>(ranges[w].second - ranges[w].first);
    EXPECT_NEAR(windows.logged[w].loss_mean, sum / steps, 1e-12 * sum) << w;
    EXPECT_EQ(windows.logged[w].loss, every.logged[ranges[w].second - 1].loss) << w;
  }
  EXPECT_EQ(windows.final_loss_mean, windows.logged.back().loss_mean);
  EXPECT_EQ(windows.final_window_steps, 2);
  EXPECT_MENTIONS(out.str(), fmt::format("final loss {:.4f} (mean {:.4f} over steps 11-12)",
                                         windows.final_loss, windows.final_loss_mean));
}

TEST(RunTraining, GptReportsTokensPerSecondEveryLogStep) {
  TESSERA_REQUIRE_STRATEGY("none");
  std::ostringstream out;
  RunOptions options;
  options.out = &out;
  const RunResult result = run_training(make_config(gpt_toml("none", 1, 5)), plugins(), options);
  ASSERT_EQ(result.logged.size(), 3U);  // steps 2, 4 and the last, 5
  EXPECT_EQ(result.logged[0].step, 2);
  EXPECT_EQ(result.logged[2].step, 5);
  for (const auto& m : result.logged) {
    EXPECT_DOUBLE_EQ(m.tokens_per_second, m.samples_per_second * 8);
  }
  EXPECT_MENTIONS(out.str(), "tok/s");
  EXPECT_LT(result.logged.back().loss, std::log(32.0));
}

// The log and the result carry the model FLOP/s per rank and its share of
// the sgemm rate measured at start-up (MFU).
TEST(RunTraining, ReportsModelFlopsAndUtilisation) {
  TESSERA_REQUIRE_STRATEGY("none");
  std::ostringstream out;
  RunOptions options;
  options.out = &out;
  const RunResult result = run_training(
      make_config(gpt_toml("none", 1, 4), {"run.threads_per_rank=1"}), plugins(), options);
  EXPECT_GT(result.plan.model_flops_per_step, 0.0);
  EXPECT_EQ(result.plan.threads_per_rank, 1);
  EXPECT_GT(result.gemm_rate, 0.0);
  EXPECT_NEAR(result.model_flops_per_second,
              result.plan.model_flops_per_step / result.mean_step_seconds,
              1e-9 * result.model_flops_per_second);
  EXPECT_NEAR(result.mfu, result.model_flops_per_second / result.gemm_rate, 1e-12);
  for (const auto& m : result.logged) {
    EXPECT_NEAR(m.model_flops_per_second, result.plan.model_flops_per_step / m.step_seconds,
                1e-9 * m.model_flops_per_second);
    EXPECT_GT(m.mfu, 0.0);
  }
  EXPECT_MENTIONS(out.str(), "compute: 1 thread per rank (run.threads_per_rank), sgemm ");
  EXPECT_MENTIONS(out.str(), "GFLOP/s/rank, MFU ");
}

// Intra-op threads split the model's GEMMs: a fixed thread count gives the
// same bits every time, and 2 threads train what 1 thread does up to float
// rounding (with SGD: AdamW's first steps would turn a rounding difference
// in a near-zero gradient into a visible one).
TEST(RunTraining, ThreadsPerRankRepeatAndAgreeWithOneThread) {
  TESSERA_REQUIRE_STRATEGY("none");
  const auto train = [](int threads) {
    RunOptions options;
    std::ostringstream out;
    options.out = &out;
    options.collect_final_state = true;
    // Large enough that the GEMMs split (d 64, 16 sequences of 32 tokens).
    RunResult r =
        run_training(make_config(gpt_toml("none", 1, 3),
                                 {"model.d_model=64", "model.seq_len=32", "data.batch_size=16",
                                  "optimizer.name=\"sgd\"", "optimizer.lr=0.1",
                                  "run.threads_per_rank=" + std::to_string(threads)}),
                     plugins(), options);
    EXPECT_EQ(r.plan.threads_per_rank, threads);
    return r;
  };
  const RunResult one = train(1);
  const RunResult two = train(2);
  const RunResult again = train(2);
  ASSERT_EQ(two.final_state.size(), 1U);
  expect_same_state(two.final_state[0], again.final_state[0]);
  // Per tensor, max |difference| / max |value|.
  for (const auto& [name, tensor] : one.final_state[0].tensors) {
    const std::vector<float> x = one.final_state[0].full(name);
    const std::vector<float> y = two.final_state[0].full(name);
    ASSERT_EQ(x.size(), y.size()) << name;
    double diff = 0;
    double scale = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(x[i])));
    }
    EXPECT_LE(diff, 1e-5 * scale) << name;
  }
  EXPECT_NEAR(two.final_loss, one.final_loss, 1e-5 * std::fabs(one.final_loss));
}

// Gradient accumulation: the same global batch in 4 micro-batches trains
// the same model (up to float summation order).
TEST(RunTraining, MicroBatchesTrainLikeOneBatch) {
  TESSERA_REQUIRE_STRATEGY("none");
  const std::vector<std::string> sgd = {"optimizer.name=sgd", "optimizer.lr=0.2",
                                        "optimizer.weight_decay=0.0"};
  std::vector<std::string> micro = sgd;
  micro.push_back("data.micro_batches=4");
  RunOptions options;
  options.collect_final_state = true;
  std::ostringstream sink;
  options.out = &sink;
  const RunResult one = run_training(make_config(mlp_toml("none", 1, 5), sgd), plugins(), options);
  const RunResult four =
      run_training(make_config(mlp_toml("none", 1, 5), micro), plugins(), options);
  ASSERT_EQ(one.final_state.size(), 1U);
  ASSERT_EQ(four.final_state.size(), 1U);
  EXPECT_NEAR(one.final_loss, four.final_loss, 1e-5 * std::abs(one.final_loss));
  for (const auto& [name, tensor] : one.final_state[0].tensors) {
    const std::vector<float> a = one.final_state[0].full(name);
    const std::vector<float> b = four.final_state[0].full(name);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-5 * (1.0 + std::abs(a[i]))) << name << "[" << i << "]";
    }
  }
}

// model.init: with 0 steps the final state is exactly the file's values and
// the optimizer state is fresh (zero).
TEST(RunTraining, ModelInitGivesTheFileValuesAtStepZero) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  const Config base = make_config(mlp_toml("none", 1, 0));
  const auto model = model::make_model(base.model, plugins());
  model::ModelParams params(*model);
  params.init(*model, 99);  // another seed than the run's 42
  SafetensorsWriter writer;
  std::vector<std::pair<std::string, model::ParamRef>> names;
  for (size_t u = 0; u < model->size(); ++u) {
    const auto specs = model->params(u);
    for (size_t p = 0; p < specs.size(); ++p) {
      const std::string name = model->unit_name(u) + "." + specs[p].name;
      const std::vector<uint64_t> shape(specs[p].shape.begin(), specs[p].shape.end());
      writer.add<float>(name, shape, std::span<const float>(params.at({u, p})));
      names.emplace_back(name, model::ParamRef{u, p});
    }
  }
  const auto file = dir / "init.safetensors";
  writer.save(file);

  RunOptions options;
  options.collect_final_state = true;
  std::ostringstream out;
  options.out = &out;
  const RunResult result = run_training(
      make_config(mlp_toml("none", 1, 0), {"model.init=" + file.string()}), plugins(), options);
  EXPECT_EQ(result.last_step, 0);
  EXPECT_TRUE(result.logged.empty());
  EXPECT_MENTIONS(out.str(), "initial weights: " + file.string());
  ASSERT_EQ(result.final_state.size(), 1U);
  const train::CollectedState& state = result.final_state[0];
  for (const auto& [name, ref] : names) {
    const std::vector<float> got = state.full(name);
    const std::span<const float> want = params.at(ref);
    ASSERT_EQ(got.size(), want.size()) << name;
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << name;
  }
  for (const auto& [name, tensor] : state.tensors) {
    if (name.rfind("optim.", 0) != 0) continue;
    for (const float v : state.full(name)) ASSERT_EQ(v, 0.0f) << name;
  }
}

TEST(RunTraining, UnwritableMetricsFileFailsBeforeTheRanksStart) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  std::ofstream(dir / "plain") << "x";
  const auto bad = dir / "plain" / "metrics.jsonl";
  const std::string message = error_of([&] {
    (void)run_training(make_config(mlp_toml("none", 1, 2), {"run.metrics=" + bad.string()}),
                       plugins());
  });
  EXPECT_MENTIONS(message, "run.metrics: cannot open '" + bad.string() +
                               "' for writing: " + std::strerror(ENOTDIR));
}

// A rank that fails (here rank 0, whose step directory cannot be created:
// a file of its name is in the way) is named, and the ranks waiting for it
// are released.
void expect_rank_zero_failure(const std::string& strategy, int world) {
  ScratchDir dir;
  std::ofstream(dir / "step-00000002") << "in the way";
  const Config config =
      make_config(mlp_toml(strategy, world, 4),
                  {"checkpoint.dir=" + dir.path().string(), "checkpoint.every=2"});
  std::ostringstream out;
  RunOptions options;
  options.out = &out;
  try {
    (void)run_training(config, plugins(), options);
    FAIL() << "the run succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("rank 0: checkpoint: cannot create", 0), 0U) << e.what();
  }
}

TEST(RunTraining, AFailingRankIsNamed) {
  TESSERA_REQUIRE_STRATEGY("none");
  expect_rank_zero_failure("none", 1);
}

TEST(RunTraining, AFailingRankReleasesTheOthers) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  expect_rank_zero_failure("ddp", 3);
}

}  // namespace
}  // namespace tessera::test

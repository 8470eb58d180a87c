// plan_run: what is checked before any rank starts, and the plan it returns.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "run_fixture.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/core/rank_threads.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

using train::plan_run;

#define EXPECT_MENTIONS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST(PlanRun, ReportsThePluginFilesAndSizes) {
  TESSERA_REQUIRE_STRATEGY("none");
  const Config config = make_config(mlp_toml("none", 1, 3));
  const train::RunPlan plan = plan_run(config, plugins());
  EXPECT_EQ(plan.backend, "inmemory");
  EXPECT_EQ(plan.backend_file.filename(), "libtessera_backend_inmemory.so");
  EXPECT_EQ(plan.strategy_file.filename(), "libtessera_strategy_none.so");
  EXPECT_TRUE(plan.thread_ranks);
  EXPECT_EQ(plan.model, "mlp");
  EXPECT_EQ(plan.model_file.filename(), "libtessera_model_mlp.so");
  EXPECT_EQ(plan.parameters, 8 * 16 + 16 + 16 * 4 + 4);
  EXPECT_EQ(plan.global_batch, 16);
  EXPECT_EQ(plan.micro_batches, 1);
  EXPECT_EQ(plan.tokens_per_example, 0);
  EXPECT_EQ(plan.resume_step, 0);
  EXPECT_MENTIONS(plan.data, "synthetic");
}

TEST(PlanRun, UnknownStrategyListsTheAvailableOnes) {
  const std::string message =
      error_of([] { (void)plan_run(make_config(mlp_toml("nosuch", 1, 3)), plugins()); });
  EXPECT_MENTIONS(message, "'nosuch'");
  EXPECT_MENTIONS(message, "available");
  for (const auto& name : plugins().names(TESSERA_KIND_STRATEGY)) EXPECT_MENTIONS(message, name);
}

TEST(PlanRun, UnknownBackendListsTheAvailableOnes) {
  const std::string message = error_of([] {
    (void)plan_run(make_config(mlp_toml("none", 1, 3), {"backend.name=nosuch"}), plugins());
  });
  EXPECT_MENTIONS(message, "'nosuch'");
  EXPECT_MENTIONS(message, "inmemory");
}

TEST(PlanRun, UnknownStrategyOptionIsRefused) {
  TESSERA_REQUIRE_STRATEGY("none");
  const std::string message = error_of([] {
    (void)plan_run(make_config(mlp_toml("none", 1, 3), {"strategy.options.bogus_key=1"}),
                   plugins());
  });
  EXPECT_MENTIONS(message, "bogus_key");
  EXPECT_MENTIONS(message, "[strategy.options]");
}

TEST(PlanRun, NoneRefusesTwoRanks) {
  TESSERA_REQUIRE_STRATEGY("none");
  try {
    (void)plan_run(make_config(mlp_toml("none", 2, 3)), plugins());
    FAIL() << "strategy 'none' accepted world_size 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << e.what();
    EXPECT_MENTIONS(e.what(), "none");
  }
}

TEST(PlanRun, MicroBatchesBeyondTheBatchAreRefusedByTheConfig) {
  const std::string message = error_of([] {
    (void)make_config(mlp_toml("none", 1, 3), {"data.batch_size=2", "data.micro_batches=3"});
  });
  EXPECT_MENTIONS(message, "'data.micro_batches' = 3 must not exceed 'data.batch_size' = 2");
}

TEST(PlanRun, GlobalBatchSmallerThanRanksTimesMicroBatchesFailsBeforeTheFirstStep) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  const Config config =
      make_config(mlp_toml("ddp", 4, 3), {"data.batch_size=6", "data.micro_batches=2"});
  // The ranks refuse it once the strategy reports its data-parallel
  // degree; plan_run (--dry-run) already from the strategy's estimate.
  for (const std::string& message :
       {error_of([&] { (void)train::run_training(config, plugins()); }),
        error_of([&] { (void)plan_run(config, plugins()); })}) {
    EXPECT_MENTIONS(message, "data.batch_size = 6 is too small");
    EXPECT_MENTIONS(message, "4 data-parallel slices x data.micro_batches = 2");
    EXPECT_MENTIONS(message, "data.batch_size >= 8");
  }
}

// What a strategy refuses only once it sees the built model, plan_run
// (--dry-run) refuses through its estimate, with the words of the refusal
// the ranks would meet at create.
TEST(PlanRun, RefusesWhatTheStrategyRefusesForTheModel) {
  TESSERA_REQUIRE_STRATEGY("tensor");
  TESSERA_REQUIRE_STRATEGY("pipeline");
  const auto both = [](const Config& config, const std::string& want) {
    const std::string planned = error_of([&] { (void)plan_run(config, plugins()); });
    EXPECT_MENTIONS(planned, want);
    EXPECT_MENTIONS(error_of([&] { (void)train::run_training(config, plugins()); }), want);
  };
  // gpt_toml's 2 heads do not split over 4 ranks.
  const Config tensor4 = make_config(gpt_toml("tensor", 4, 2), {"strategy.options.size=4"});
  both(tensor4, "tensor: [strategy.options] size = 4, mode = \"tensor\" cannot split the model");
  EXPECT_MENTIONS(error_of([&] { (void)plan_run(tensor4, plugins()); }),
                  "strategy 'tensor' cannot run model 'gpt' on 4 ranks");
  both(make_config(gpt_toml("pipeline", 2, 2),
                   {"strategy.options.stages=2", "strategy.options.schedule=\"1f1b\""}),
       "schedule = \"1f1b\" needs data.micro_batches >= stages (2)");
  both(make_config(gpt_toml("tensor", 2, 2),
                   {"strategy.options.size=2", "compression.name=\"topk\""}),
       "takes no gradient compressor");
  // What fits plans as before.
  (void)plan_run(make_config(gpt_toml("tensor", 2, 2), {"strategy.options.size=2"}), plugins());
}

// With process ranks and run.world_size 1 the launcher sets the size, so
// nothing is estimated before the ranks connect.
TEST(PlanRun, ProcessRanksOfAnUnknownWorldAreCheckedOnceConnected) {
  TESSERA_REQUIRE_STRATEGY("tensor");
  if (plugins().find(TESSERA_KIND_BACKEND, "gloo") == nullptr) {
    GTEST_SKIP() << "backend plugin 'gloo' is not built (plugins/backends/gloo)";
  }
  const Config config = make_config(
      gpt_toml("tensor", 1, 2),
      {"backend.name=\"gloo\"", "strategy.options.size=1", "compression.name=\"topk\""});
  EXPECT_EQ(plan_run(config, plugins()).strategy, "tensor");
}

TEST(PlanRun, MissingInitFileIsNamed) {
  TESSERA_REQUIRE_STRATEGY("none");
  const std::string message = error_of([] {
    (void)plan_run(make_config(mlp_toml("none", 1, 3), {"model.init=no/such/weights.safetensors"}),
                   plugins());
  });
  EXPECT_MENTIONS(message, "model.init: file 'no/such/weights.safetensors' does not exist");
}

TEST(PlanRun, InitFileWithAWrongShapeNamesTheTensor) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  const std::vector<float> values(8 * 15, 0.5f);
  SafetensorsWriter writer;
  writer.add<float>("layer0.w", {8, 15}, std::span<const float>(values));
  const auto file = dir / "init.safetensors";
  writer.save(file);
  const std::string message = error_of([&] {
    (void)plan_run(make_config(mlp_toml("none", 1, 3), {"model.init=" + file.string()}), plugins());
  });
  EXPECT_MENTIONS(message, "tensor 'layer0.w' has shape [8, 15], but model 'mlp' needs [8, 16]");
}

TEST(PlanRun, InitFileWithoutAParameterNamesIt) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  const std::vector<float> values(8 * 16, 0.5f);
  SafetensorsWriter writer;
  writer.add<float>("layer0.w", {8, 16}, std::span<const float>(values));
  const auto file = dir / "init.safetensors";
  writer.save(file);
  const std::string message = error_of([&] {
    (void)plan_run(make_config(mlp_toml("none", 1, 3), {"model.init=" + file.string()}), plugins());
  });
  EXPECT_MENTIONS(message, "has no tensor 'layer0.b'");
}

// A NaN in the initial state is refused when the ranks load it, naming the
// file and the tensor (not at the first gradient check).
TEST(PlanRun, InitFileWithANaNFailsWhenLoadedNamingTheTensor) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  SafetensorsWriter writer;
  const std::vector<float> w0(8 * 16, 0.5f);
  const std::vector<float> b0(16, 0.0f);
  std::vector<float> w1(16 * 4, 0.25f);
  w1[5] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> b1(4, 0.0f);
  writer.add<float>("layer0.w", {8, 16}, std::span<const float>(w0));
  writer.add<float>("layer0.b", {16}, std::span<const float>(b0));
  writer.add<float>("head.w", {16, 4}, std::span<const float>(w1));
  writer.add<float>("head.b", {4}, std::span<const float>(b1));
  const auto file = dir / "init.safetensors";
  writer.save(file);
  const Config config = make_config(mlp_toml("none", 1, 3), {"model.init=" + file.string()});
  (void)plan_run(config, plugins());  // shapes and names are right
  const std::string message = error_of([&] { (void)train::run_training(config, plugins()); });
  EXPECT_MENTIONS(message, "state read: " + file.string() +
                               " (parameters): tensor 'head.w' holds nan (element 5 of the part "
                               "read): the state is damaged");
  EXPECT_EQ(message.find("state_io.cpp"), std::string::npos) << message;
}

TEST(PlanRun, ShardedCheckpointsArePlanned) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  const train::RunPlan plan =
      plan_run(make_config(mlp_toml("none", 1, 3),
                           {"checkpoint.dir=" + dir.path().string(), "checkpoint.format=sharded"}),
               plugins());
  EXPECT_EQ(plan.resume_step, 0);
}

TEST(PlanRun, UnknownCompressorIsNamed) {
  TESSERA_REQUIRE_STRATEGY("none");
  const std::string message = error_of([] {
    (void)plan_run(make_config(mlp_toml("none", 1, 3), {"compression.name=nosuch"}), plugins());
  });
  EXPECT_MENTIONS(message, "[compression]: key 'name' names unknown compressor 'nosuch'");
}

TEST(PlanRun, ModelErrorsNameTheKey) {
  TESSERA_REQUIRE_STRATEGY("none");
  const std::string message = error_of(
      [] { (void)plan_run(make_config(mlp_toml("none", 1, 3), {"model.classes=1"}), plugins()); });
  EXPECT_MENTIONS(message, "classes");
}

TEST(PlanRun, WarmupLongerThanTheRunIsRefused) {
  TESSERA_REQUIRE_STRATEGY("none");
  const std::string message = error_of([] {
    (void)plan_run(make_config(mlp_toml("none", 1, 3), {"optimizer.warmup_steps=5"}), plugins());
  });
  // Named where it was set, although it is checked once the run is planned.
  EXPECT_MENTIONS(message,
                  "--set optimizer.warmup_steps=5: 'optimizer.warmup_steps' = 5 exceeds "
                  "'run.steps' = 3: the learning-rate warm-up must end within the run");
}

// run.metrics is truncated by a fresh run, so it must not be a file the run
// reads, lie in the checkpoint directory, or be some other file that
// exists; an earlier run's metrics (JSON lines) and an empty file are fine.
TEST(PlanRun, MetricsThatWouldDestroyAFileAreRefused) {
  TESSERA_REQUIRE_STRATEGY("none");
  const ScratchDir dir;
  const std::string base = mlp_toml("none", 1, 3);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return (dir / name).string();
  };
  const auto refusal = [&](const std::vector<std::string>& overrides) {
    return error_of([&] { (void)plan_run(make_config(base, overrides), plugins()); });
  };
  const std::string init = (dir / "init.safetensors").string();
  SafetensorsWriter writer;
  const std::vector<float> w0(8 * 16, 0.5f);
  const std::vector<float> b0(16, 0.0f);
  const std::vector<float> w1(16 * 4, 0.25f);
  const std::vector<float> b1(4, 0.0f);
  writer.add<float>("layer0.w", {8, 16}, std::span<const float>(w0));
  writer.add<float>("layer0.b", {16}, std::span<const float>(b0));
  writer.add<float>("head.w", {16, 4}, std::span<const float>(w1));
  writer.add<float>("head.b", {4}, std::span<const float>(b1));
  writer.save(init);
  EXPECT_MENTIONS(refusal({"model.init=" + init, "run.metrics=" + init}),
                  "run.metrics = '" + init + "' is model.init, which the run reads");
  EXPECT_MENTIONS(refusal({"run.metrics=" + init}),
                  "exists and is not a metrics file (its first byte is not '{'): writing the "
                  "metrics would destroy it");
  const std::string ckpt = (dir / "ckpt").string();
  for (const char* owned : {"/latest", "/.lock", "/step-00000003/metrics.jsonl"}) {
    EXPECT_MENTIONS(refusal({"checkpoint.dir=" + ckpt, "run.metrics=" + ckpt + owned}),
                    "is a file of checkpoint.dir '" + ckpt + "' that checkpointing writes");
  }
  // Beside the checkpoints is fine: the run leaves other files there alone.
  EXPECT_NO_THROW((void)plan_run(
      make_config(base, {"checkpoint.dir=" + ckpt, "run.metrics=" + ckpt + "/metrics.jsonl"}),
      plugins()));
  const std::string toml = write("run.toml", base);
  const std::string config_msg = error_of([&] {
    const std::vector<std::string> overrides = {"run.metrics=" + toml};
    (void)plan_run(load_config(toml, overrides), plugins());
  });
  EXPECT_MENTIONS(config_msg, "is the configuration file, which the run reads");

  const std::string earlier = write("earlier.jsonl", "{\"step\":1}\n");
  EXPECT_NO_THROW((void)plan_run(make_config(base, {"run.metrics=" + earlier}), plugins()));
  const std::string empty = write("empty.jsonl", "");
  EXPECT_NO_THROW((void)plan_run(make_config(base, {"run.metrics=" + empty}), plugins()));
}

// Ranks as threads: a world larger than the process can start is refused
// before any thread starts (and so at --dry-run), naming the key, the value
// and the limit. It once ended in std::terminate.
TEST(PlanRun, AWorldBeyondTheRankThreadLimitIsRefused) {
  TESSERA_REQUIRE_STRATEGY("none");
  const Config config = make_config(mlp_toml("none", 40000, 3));
  const std::string limit = rank_thread_excess(40000, "run.world_size = 40000", "inmemory");
  ASSERT_FALSE(limit.empty());
  for (const bool run : {false, true}) {
    const std::string message = error_of([&] {
      if (run) {
        (void)train::run_training(config, plugins());
      } else {
        (void)plan_run(config, plugins());
      }
    });
    EXPECT_EQ(message, limit);
    EXPECT_EQ(message.rfind("run.world_size = 40000 is more than the ", 0), 0U) << message;
    EXPECT_MENTIONS(message, " ranks backend 'inmemory' can run as threads of this process (");
  }
}

TEST(PlanRun, ProductsThatOverflowAreRefused) {
  TESSERA_REQUIRE_STRATEGY("none");
  std::string message = error_of([] {
    (void)plan_run(make_config(gpt_toml("none", 1, 3), {"data.batch_size=2305843009213693952"}),
                   plugins());
  });
  EXPECT_EQ(message,
            "data.batch_size = 2305843009213693952 times the seq_len = 8 of model 'gpt' overflows "
            "the 64-bit count of tokens (and their bytes) in a batch; lower data.batch_size");
  message = error_of([] {
    (void)plan_run(make_config(mlp_toml("none", 1, 3), {"data.batch_size=4611686018427387904"}),
                   plugins());
  });
  EXPECT_MENTIONS(message,
                  "data.batch_size = 4611686018427387904 times the features = 8 of "
                  "model 'mlp' overflows");
  message = error_of([] {
    (void)plan_run(make_config(mlp_toml("none", 1, 3),
                               {"run.steps=1099511627776", "data.batch_size=1073741824"}),
                   plugins());
  });
  EXPECT_EQ(message,
            "run.steps = 1099511627776 times data.batch_size = 1073741824 overflows the 64-bit "
            "count of examples the run draws; lower run.steps or data.batch_size");
}

TEST(PlanRun, ResumeWithoutACheckpointStartsFresh) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  const train::RunPlan plan =
      plan_run(make_config(mlp_toml("none", 1, 3),
                           {"checkpoint.dir=" + dir.path().string(), "checkpoint.resume=true"}),
               plugins());
  EXPECT_EQ(plan.resume_step, 0);
  EXPECT_TRUE(plan.resume_file.empty());
}

TEST(PlanRun, ResumeWithABrokenLatestFileIsRefused) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  {
    std::ofstream latest(dir / "latest");
    latest << "step-00000009\n";
  }
  const std::string message = error_of([&] {
    (void)plan_run(make_config(mlp_toml("none", 1, 3),
                               {"checkpoint.dir=" + dir.path().string(), "checkpoint.resume=true"}),
                   plugins());
  });
  EXPECT_MENTIONS(message, "names 'step-00000009'");
  EXPECT_MENTIONS(message, "does not exist");
}

}  // namespace
}  // namespace tessera::test

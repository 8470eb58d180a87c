// StrategyPlugin: an unknown name is an error listing what exists (also in
// an empty registry), and, when the build has the `none` strategy and the
// `inmemory` backend, one rank created through the host tables loads the
// model's init, trains like the reference trainer and saves what it holds;
// the pipeline refuses micro-batches its schedule cannot run at create
// when the host says how many, else at the first step.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/error_of.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "tessera/sdk/error.hpp"
#include "train/train_util.hpp"

namespace tessera::train {
namespace {

using test::error_of;

TEST(StrategyPlugin, UnknownNameInAnEmptyRegistrySaysNoneAvailable) {
  const PluginRegistry registry;
  const std::string msg = error_of(
      [&] { StrategyPlugin plugin(registry, "zero9", nullptr, "test.toml: [strategy.options]"); });
  EXPECT_NE(msg.find("'zero9'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("strategy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("available: none"), std::string::npos) << msg;
}

TEST(StrategyPlugin, UnknownNameListsTheBuiltStrategies) {
  PluginRegistry registry;
  registry.scan({TESSERA_TRAIN_PLUGIN_DIR});
  const std::vector<std::string> names = registry.names(TESSERA_KIND_STRATEGY);
  if (names.empty()) GTEST_SKIP() << "no strategy plugin is built in " << TESSERA_TRAIN_PLUGIN_DIR;
  const std::string msg = error_of(
      [&] { StrategyPlugin plugin(registry, "zero9", nullptr, "test.toml: [strategy.options]"); });
  for (const std::string& name : names) {
    EXPECT_NE(msg.find(name), std::string::npos) << "'" << name << "' missing from: " << msg;
  }
}

class NoneStrategy : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.scan({TESSERA_TRAIN_PLUGIN_DIR});
    if (registry_.find(TESSERA_KIND_STRATEGY, "none") == nullptr ||
        registry_.find(TESSERA_KIND_BACKEND, "inmemory") == nullptr) {
      GTEST_SKIP() << "the 'none' strategy or the 'inmemory' backend is not built in "
                   << TESSERA_TRAIN_PLUGIN_DIR;
    }
  }
  PluginRegistry registry_;
};

TEST_F(NoneStrategy, UnknownOptionIsRefusedNamingWhere) {
  toml::table options;
  options.insert("bucket_mb", 25);
  const std::string msg = error_of(
      [&] { StrategyPlugin plugin(registry_, "none", &options, "run.toml: [strategy.options]"); });
  EXPECT_NE(msg.find("run.toml: [strategy.options]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bucket_mb"), std::string::npos) << msg;
}

TEST_F(NoneStrategy, OneRankTrainsLikeTheReference) {
  const StrategyPlugin plugin(registry_, "none", nullptr, "test.toml: [strategy.options]");
  EXPECT_EQ(plugin.name(), "none");
  EXPECT_TRUE(plugin.path().filename().string().find("none") != std::string::npos);
  plugin.check(1);

  BackendSettings settings;
  settings.world_size = 1;
  settings.timeout = std::chrono::milliseconds(30000);
  const auto backend = open_backend(registry_, "inmemory", nullptr, "test", settings);
  const ThreadRankGuard rank(0);
  const auto comm = backend->connect(0);
  const auto m = test::tiny_mlp();
  OptimizerParams hp;
  hp.momentum = 0.9;
  const auto opt = make_optimizer("momentum", hp);

  const auto strategy = plugin.create(*comm, *m, *opt);
  EXPECT_EQ(strategy->layout().data_size, 1);
  EXPECT_EQ(strategy->layout().data_rank, 0);
  const auto init = init_source(*m, 11);
  strategy->load(*init);

  // The reference: the same init, micro-batches and update rule in-process.
  model::ModelParams params(*m);
  params.init(*m, 11);
  const std::vector<Batch> micro = {test::batch_for(*m, 3, 1), test::batch_for(*m, 3, 2)};
  const std::vector<float> scales = {1.0F / 6.0F, 1.0F / 6.0F};
  model::ModelParams grads(*m);
  double ref_loss = 0;
  for (std::size_t i = 0; i < micro.size(); ++i) {
    ref_loss += model::reference_forward_backward(*m, params, grads, micro[i], scales[i]);
  }
  std::vector<float> flat = params.flatten();
  const std::vector<float> flat_grads = grads.flatten();
  OptimizerState state = opt->make_state(flat.size());
  opt->step(flat, flat_grads, state, 1, 0.05F);

  const tessera_step_result result = strategy->step(micro, scales, 1, 0.05F, 0.0, 6, 0);
  EXPECT_NEAR(result.loss, ref_loss, 1e-5 * std::abs(ref_loss));
  EXPECT_GT(result.grad_norm, 0.0);

  CollectedState saved = strategy->save(1, /*all_replicas=*/true);
  std::size_t at = 0;
  for (std::size_t u = 0; u < m->size(); ++u) {
    for (const auto& spec : m->params(u)) {
      const std::string name = m->unit_name(u) + "." + spec.name;
      const std::vector<float> got = saved.full(name);
      ASSERT_EQ(got.size(), static_cast<std::size_t>(spec.numel())) << name;
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], flat[at + i], 1e-5F) << name << " element " << i;
      }
      const std::vector<float> momentum = saved.full("optim." + name + ".momentum_buffer");
      EXPECT_EQ(momentum.size(), got.size()) << name;
      at += got.size();
    }
  }
  EXPECT_EQ(at, flat.size());

  // A failing call comes back as tessera::Error naming the strategy and rank.
  const std::vector<float> one_scale = {1.0F};
  const std::string msg =
      error_of([&] { (void)strategy->step(micro, one_scale, 2, 0.05F, 0.0, 6, 0); });
  EXPECT_NE(msg.find("strategy 'none' (rank 0)"), std::string::npos) << msg;

  // A unit failing inside the plugin's step: the model table's message
  // travels through host last_error into the plugin's error and back.
  std::vector<Batch> bad = micro;
  bad[1].targets[2] = 3;  // the mlp has 3 classes
  const std::string unit_msg =
      error_of([&] { (void)strategy->step(bad, scales, 2, 0.05F, 0.0, 6, 0); });
  EXPECT_NE(unit_msg.find("strategy 'none' (rank 0): step 2"), std::string::npos) << unit_msg;
  EXPECT_NE(unit_msg.find("model 'mlp' unit"), std::string::npos) << unit_msg;
  EXPECT_NE(unit_msg.find("forward"), std::string::npos) << unit_msg;
}

// Strategy 2.9: the host says data.micro_batches at create, and the
// pipeline refuses a count its schedule cannot run there, before any state
// is loaded. A host that does not say it (0, as before 2.9) gets the same
// refusal from the first step, before any compute.
TEST(PipelineStrategy, MicroBatchesAreRefusedAtCreateOrElseAtTheStep) {
  PluginRegistry registry;
  registry.scan({TESSERA_TRAIN_PLUGIN_DIR});
  if (registry.find(TESSERA_KIND_STRATEGY, "pipeline") == nullptr ||
      registry.find(TESSERA_KIND_BACKEND, "inmemory") == nullptr) {
    GTEST_SKIP() << "the 'pipeline' strategy or the 'inmemory' backend is not built in "
                 << TESSERA_TRAIN_PLUGIN_DIR;
  }
  toml::table options;
  options.insert("stages", 2);
  options.insert("schedule", "1f1b");
  const StrategyPlugin plugin(registry, "pipeline", &options, "test.toml: [strategy.options]");
  BackendSettings settings;
  settings.world_size = 2;
  settings.timeout = std::chrono::milliseconds(30000);
  const auto backend = open_backend(registry, "inmemory", nullptr, "test", settings);
  const auto m = test::tiny_mlp();  // 3 units
  const auto opt = make_optimizer("sgd", OptimizerParams{});

  std::array<std::string, 2> at_create;
  std::array<std::string, 2> at_step;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      const ThreadRankGuard rank(r);
      const auto comm = backend->connect(r);
      at_create[r] = error_of([&] {
        (void)plugin.create(*comm, *m, *opt, nullptr, {}, /*joining=*/false,
                            /*micro_batches=*/1);
      });
      // Not said: create accepts, the step refuses (no collective runs).
      const auto strategy = plugin.create(*comm, *m, *opt);
      strategy->load(*init_source(*m, 11));
      const std::vector<Batch> micro = {test::batch_for(*m, 4, 1)};
      const std::vector<float> scales = {0.25F};
      at_step[r] = error_of([&] { (void)strategy->step(micro, scales, 1, 0.05F, 0.0, 4, 0); });
    });
  }
  for (std::thread& t : ranks) t.join();
  const std::string refusal =
      "pipeline: schedule = \"1f1b\" needs data.micro_batches >= stages (2), but a step has 1 "
      "micro-batches";
  for (int r = 0; r < 2; ++r) {
    const std::string who = "strategy 'pipeline' (rank " + std::to_string(r) + "): ";
    EXPECT_NE(at_create[r].find(who + "create: " + refusal), std::string::npos) << at_create[r];
    EXPECT_NE(at_step[r].find(who + "step 1: " + refusal), std::string::npos) << at_step[r];
  }
}

}  // namespace
}  // namespace tessera::train

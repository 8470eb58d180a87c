// Same training, any backend: `ddp` on the reference gpt with two ranks gives
// the same parameters and optimizer state on mpi and on gloo as on the
// in-memory backend (ranks as threads), within float tolerance — the only
// difference allowed is the order in which each engine adds gradients. On a
// machine with a GPU, the data-parallel strategies on nccl too. And
// `async_sgd` at staleness 0 (synchronous SGD: one server, two workers as
// processes) ends where in-memory `ddp` on two ranks does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint_tensors.hpp"
#include "engines.hpp"

namespace tessera::mptest {
namespace {

constexpr int kTrainingRanks = 2;
constexpr int kSteps = 8;

// Runs the config on `e` (with strategy `strategy` on `ranks` ranks, and
// the overrides `sets`) into `dir`/<engine>-<strategy>; returns the final
// checkpoint.
std::filesystem::path train(Engine e, const std::filesystem::path& config,
                            const std::filesystem::path& dir, const std::string& strategy = "ddp",
                            int ranks = kTrainingRanks, const std::vector<std::string>& sets = {}) {
  const std::string name = std::string(engine_name(e)) + "-" + strategy;
  const auto ckpt = dir / name;
  const auto log = dir / (name + ".log");
  std::vector<std::string> all{"checkpoint.dir=\"" + ckpt.string() + "\"",
                               "strategy.name=\"" + strategy + "\""};
  all.insert(all.end(), sets.begin(), sets.end());
  ChildProcess child(train_command(e, ranks, config, all, "same-" + name), launched(log));
  const ChildExit exit = child.wait(std::chrono::minutes(4));
  EXPECT_TRUE(exit.ok()) << engine_name(e) << " run " << exit.describe() << ":\n" << read_text(log);
  return ckpt / "step-00000008" / "model.safetensors";
}

class SameTraining : public ::testing::TestWithParam<Engine> {};

TEST_P(SameTraining, MatchesInmemory) {
  const Engine engine = GetParam();
  if (const std::string why = engine_unavailable(engine); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("same-training");
  const auto config = write_gpt_config(dir.path(), kSteps, 0, 60.0);
  const auto expected_file = train(Engine::kInmemory, config, dir.path());
  const auto actual_file = train(engine, config, dir.path());
  if (HasFailure()) return;

  expect_close(tensors_of_file(actual_file), tensors_of_file(expected_file),
               std::string("ddp on ") + engine_name(engine));
}

INSTANTIATE_TEST_SUITE_P(Backends, SameTraining, ::testing::Values(Engine::kMpi, Engine::kGloo),
                         engine_param_name<::testing::TestParamInfo<Engine>>);

// async_sgd with staleness 0 sums the two workers' gradients on its server
// and applies one AdamW update per step, as ddp does: one server and two
// workers, each a process, against ddp on two in-memory ranks.
class AsyncSgdProcesses : public ::testing::TestWithParam<Engine> {};

TEST_P(AsyncSgdProcesses, StalenessZeroMatchesInmemoryDdp) {
  const Engine engine = GetParam();
  if (const std::string why = engine_unavailable(engine); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir("async-sgd");
  const auto config = write_gpt_config(dir.path(), kSteps, 0, 60.0);
  const auto expected_file = train(Engine::kInmemory, config, dir.path());
  const auto actual_file =
      train(engine, config, dir.path(), "async_sgd", kTrainingRanks + 1,
            {"strategy.options={}", "strategy.options.servers=1", "strategy.options.staleness=0"});
  if (HasFailure()) return;
  expect_close(tensors_of_file(actual_file), tensors_of_file(expected_file),
               std::string("async_sgd on ") + engine_name(engine));
}

INSTANTIATE_TEST_SUITE_P(Backends, AsyncSgdProcesses,
                         ::testing::Values(Engine::kMpi, Engine::kGloo),
                         engine_param_name<::testing::TestParamInfo<Engine>>);

// On nccl (label gpu; skipped without a GPU), every data-parallel strategy:
// the models compute on the host and nccl stages their buffers through the
// GPU, so each must end exactly where it ends on the in-memory backend.
class NcclStrategies : public ::testing::TestWithParam<const char*> {};

TEST_P(NcclStrategies, MatchInmemory) {
  if (const std::string why = engine_unavailable(Engine::kNccl); !why.empty()) GTEST_SKIP() << why;
  const std::string strategy = GetParam();
  const TempDir dir("same-nccl");
  const auto config = write_gpt_config(dir.path(), kSteps, 0, 60.0, strategy);
  const auto expected_file = train(Engine::kInmemory, config, dir.path(), strategy);
  const auto actual_file = train(Engine::kNccl, config, dir.path(), strategy);
  if (HasFailure()) return;
  expect_close(tensors_of_file(actual_file), tensors_of_file(expected_file), strategy + " on nccl");
}

INSTANTIATE_TEST_SUITE_P(Gpu, NcclStrategies,
                         ::testing::Values("ddp", "zero1", "zero2", "zero3", "fsdp"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param);
                         });

}  // namespace
}  // namespace tessera::mptest

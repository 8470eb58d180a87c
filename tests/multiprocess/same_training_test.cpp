// Same training, any backend: `ddp` on the reference gpt with two ranks gives
// the same parameters and optimizer state on mpi and on gloo as on the
// in-memory backend (ranks as threads), within float tolerance — the only
// difference allowed is the order in which each engine adds gradients.
#include <gtest/gtest.h>

#include <string>

#include "checkpoint_tensors.hpp"
#include "engines.hpp"

namespace tessera::mptest {
namespace {

constexpr int kTrainingRanks = 2;
constexpr int kSteps = 8;

// Runs the config on `e` into `dir`/<engine>; returns the final checkpoint.
std::filesystem::path train(Engine e, const std::filesystem::path& config,
                            const std::filesystem::path& dir) {
  const auto ckpt = dir / engine_name(e);
  const auto log = dir / (std::string(engine_name(e)) + ".log");
  ChildProcess child(
      train_command(e, kTrainingRanks, config, {"checkpoint.dir=\"" + ckpt.string() + "\""},
                    "same-" + std::string(engine_name(e))),
      launched(log));
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

}  // namespace
}  // namespace tessera::mptest

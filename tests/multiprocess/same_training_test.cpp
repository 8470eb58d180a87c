// Same training, any backend: `ddp` on the reference gpt with two ranks gives
// the same parameters and optimizer state on mpi and on gloo as on the
// in-memory backend (ranks as threads), within float tolerance — the only
// difference allowed is the order in which each engine adds gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "engines.hpp"
#include "tessera/core/safetensors.hpp"

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
      launcher_env(), log);
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

  const auto expected = SafetensorsReader::open(expected_file);
  const auto actual = SafetensorsReader::open(actual_file);
  ASSERT_EQ(actual.names(), expected.names());
  size_t params = 0;
  for (const auto& name : expected.names()) {
    const auto& info = expected.info(name);
    ASSERT_EQ(info.dtype, TESSERA_F32) << name;
    ASSERT_EQ(actual.info(name).shape, info.shape) << name;
    std::vector<float> a(shape_numel(info.shape));
    std::vector<float> b(a.size());
    actual.read(name, std::span<float>(a));
    expected.read(name, std::span<float>(b));
    const TensorDiff d = tensor_diff(a, b);
    const double diff = d.max_abs_diff;
    const double scale = d.max_abs_reference;
    EXPECT_LE(diff, kTolerance * std::max(scale, 1e-30))
        << name << " on " << engine_name(engine) << ": max |diff| " << diff << ", max |value| "
        << scale;
    if (name.rfind("optim.", 0) != 0) ++params;
  }
  EXPECT_GT(params, 0U) << "the checkpoint holds no parameters";
}

INSTANTIATE_TEST_SUITE_P(Backends, SameTraining, ::testing::Values(Engine::kMpi, Engine::kGloo),
                         engine_param_name<::testing::TestParamInfo<Engine>>);

}  // namespace
}  // namespace tessera::mptest

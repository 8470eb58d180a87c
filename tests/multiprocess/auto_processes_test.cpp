// Strategy "auto" with a process per rank: every rank probes the backend,
// rank 0 alone runs the selector and broadcasts its choice, and all ranks
// train it (they would fail their configuration check if any trained
// another). The result equals `none` on one rank, the checkpoint records
// the choice and its selector, and rank 0's log names it.
#include <gtest/gtest.h>

#include <string>

#include "checkpoint_tensors.hpp"
#include "engines.hpp"
#include "tessera/core/train/checkpointing.hpp"

namespace tessera::mptest {
namespace {

constexpr int kAutoSteps = 4;

class AutoProcesses : public ::testing::TestWithParam<Engine> {};

TEST_P(AutoProcesses, OneChoiceForEveryRank) {
  const Engine engine = GetParam();
  if (const std::string why = engine_unavailable(engine); !why.empty()) GTEST_SKIP() << why;
  const TempDir dir(std::string("auto-") + engine_name(engine));
  const auto config = write_gpt_config(dir.path(), kAutoSteps, 0, 60.0);

  const auto run = [&](Engine e, int ranks, const std::string& strategy, const std::string& tag) {
    const auto log = dir.path() / (tag + ".log");
    ChildProcess child(train_command(e, ranks, config,
                                     {"strategy.name=\"" + strategy + "\"", "strategy.options={}",
                                      "checkpoint.dir=\"" + (dir.path() / tag).string() + "\""},
                                     tag),
                       launched(log));
    const ChildExit exit = child.wait(std::chrono::minutes(4));
    EXPECT_TRUE(exit.ok()) << tag << " run " << exit.describe() << ":\n" << read_text(log);
    return read_text(log);
  };
  (void)run(Engine::kInmemory, 1, "none", "none");
  const std::string log = run(engine, 3, "auto", "auto");
  if (HasFailure()) return;

  EXPECT_NE(log.find("strategy auto: selector 'auto' chose "), std::string::npos) << log;
  EXPECT_NE(log.find("on 3 ranks"), std::string::npos) << log;
  const auto chosen = train::find_latest_checkpoint(dir.path() / "auto");
  const auto reference = train::find_latest_checkpoint(dir.path() / "none");
  ASSERT_TRUE(chosen && reference) << log;
  EXPECT_EQ(chosen->step, kAutoSteps);
  EXPECT_EQ(chosen->metadata.at("selected_by"), "auto");
  EXPECT_NE(chosen->metadata.at("strategy"), "auto");
  EXPECT_NE(log.find("strategy: " + chosen->metadata.at("strategy") + " on 3 process ranks"),
            std::string::npos)
      << log;
  expect_close(
      tensors_of_file(chosen->file), tensors_of_file(reference->file),
      "auto (" + chosen->metadata.at("strategy") + ") on 3 " + engine_name(engine) + " processes");
}

INSTANTIATE_TEST_SUITE_P(Backends, AutoProcesses, ::testing::Values(Engine::kMpi, Engine::kGloo),
                         engine_param_name<::testing::TestParamInfo<Engine>>);

}  // namespace
}  // namespace tessera::mptest

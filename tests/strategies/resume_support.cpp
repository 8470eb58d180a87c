// Helpers of the resume tests (see resume_support.hpp).
#include "resume_support.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <random>

#include "strategy_support.hpp"

namespace tessera::test {

Scratch::Scratch() {
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() /
          ("tessera_test_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
  std::filesystem::create_directories(path_);
}

Scratch::~Scratch() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string checkpoint_toml(const std::filesystem::path& dir, int64_t every,
                            const std::string& format, bool resume) {
  return "[checkpoint]\ndir = \"" + dir.generic_string() + "\"\nevery = " + std::to_string(every) +
         "\nformat = \"" + format + "\"\n" + (resume ? "resume = true\n" : "");
}

void cut_at(const std::filesystem::path& from, const std::filesystem::path& to,
            const std::string& step_dir) {
  std::filesystem::create_directories(to);
  std::filesystem::copy(from / step_dir, to / step_dir);
  std::ofstream(to / "latest") << step_dir << "\n";
}

void resume_at_other_world(const RunSpec& base, int saved_world, int resumed_world,
                           const std::string& format, const std::filesystem::path& whole,
                           const std::filesystem::path& cut, ResumedRuns* out) {
  RunSpec s = base;
  s.steps = 20;
  s.world = saved_world;
  s.extra_toml = checkpoint_toml(whole, 10, format, false);
  out->uninterrupted = run(s);
  ASSERT_EQ(out->uninterrupted.last_step, 20);
  const std::filesystem::path step10 = whole / "step-00000010";
  ASSERT_TRUE(
      std::filesystem::exists(step10 / (format == "sharded" ? "index.json" : "model.safetensors")))
      << step10 << " holds no " << format << " checkpoint";

  // Only the step-10 checkpoint, as if the first run had stopped there.
  cut_at(whole, cut, "step-00000010");
  s.world = resumed_world;
  s.extra_toml = checkpoint_toml(cut, 10, format, true);
  out->resumed = run(s);
  EXPECT_EQ(out->resumed.plan.resume_step, 10);
  EXPECT_EQ(out->resumed.first_step, 11);
  EXPECT_EQ(out->resumed.last_step, 20);
  ASSERT_EQ(out->resumed.final_state.size(), static_cast<size_t>(resumed_world));
  ASSERT_EQ(out->resumed.plan.world_size, resumed_world);

  // The new world's pieces together hold every parameter and every
  // optimizer slot again.
  EXPECT_EQ(tensor_names(merged(out->resumed)), tensor_names(merged(out->uninterrupted)));
}

void expect_continues(const RunSpec& first, const RunSpec& second, const std::string& format) {
  Scratch whole;
  Scratch cut;
  RunSpec a = first;
  a.extra_toml = checkpoint_toml(whole.path(), 10, format, false);
  const train::RunResult uninterrupted = run(a);
  ASSERT_EQ(uninterrupted.last_step, 20);
  cut_at(whole.path(), cut.path(), "step-00000010");
  RunSpec b = second;
  b.extra_toml = checkpoint_toml(cut.path(), 10, format, true);
  const train::RunResult resumed = run(b);
  EXPECT_EQ(resumed.first_step, 11);
  ASSERT_EQ(resumed.last_step, 20);
  EXPECT_EQ(tensor_names(merged(resumed)), tensor_names(merged(uninterrupted)));
  std::string worst;
  EXPECT_LE(max_param_rel_diff(merged(resumed), merged(uninterrupted), &worst),
            tessera::test::kTolerance)
      << "largest difference in " << worst;
}

void expect_chain_continues(const RunSpec& first, const RunSpec& second, const RunSpec& third) {
  Scratch whole;
  Scratch cut;
  Scratch cut_again;
  RunSpec a = first;
  a.extra_toml = checkpoint_toml(whole.path(), 7, "full", false);
  const train::RunResult uninterrupted = run(a);
  ASSERT_EQ(uninterrupted.last_step, 20);
  cut_at(whole.path(), cut.path(), "step-00000007");
  // Every leg lasts 20 steps (the learning-rate schedule depends on it);
  // the next starts from the cut at step 14.
  RunSpec b = second;
  b.extra_toml = checkpoint_toml(cut.path(), 7, "full", true);
  const train::RunResult middle = run(b);
  EXPECT_EQ(middle.first_step, 8);
  ASSERT_EQ(middle.last_step, 20);
  cut_at(cut.path(), cut_again.path(), "step-00000014");
  RunSpec c = third;
  c.extra_toml = checkpoint_toml(cut_again.path(), 7, "full", true);
  const train::RunResult resumed = run(c);
  EXPECT_EQ(resumed.first_step, 15);
  ASSERT_EQ(resumed.last_step, 20);
  std::string worst;
  EXPECT_LE(max_param_rel_diff(merged(resumed), merged(uninterrupted), &worst),
            tessera::test::kTolerance)
      << "largest difference in " << worst;
}

}  // namespace tessera::test

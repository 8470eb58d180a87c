// `fsdp` checkpoints at one world size resume at another: full_shard
// saved on 2 ranks continues on 3, hybrid_shard (groups of 2) saved on 4
// ranks continues on 2 (one group). Each rank of the new world reads back
// only the elements of its own pieces by tensor name and range; a run
// stopped at step 10 and continued reaches the parameters of the
// uninterrupted run after 20 steps (within 1e-5 relative difference: only
// the order of float additions differs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>

#include "run_support.hpp"

namespace tessera::test {
namespace {

constexpr double kTolerance = 1e-5;

// A fresh directory under the system temporary directory, removed with its
// contents at the end of the scope.
class Scratch {
 public:
  Scratch() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("tessera_fsdp_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

RunSpec fsdp_spec(int world, const std::string& options, const std::filesystem::path& dir,
                  bool resume) {
  RunSpec spec;
  spec.model = "mlp";  // the head's 125 parameters: padded pieces on 2, 3 and 4 ranks
  spec.strategy = "fsdp";
  spec.world = world;
  spec.batch = 12;
  spec.strategy_options = options;
  spec.extra_toml = "[checkpoint]\ndir = \"" + dir.generic_string() + "\"\nevery = 10\n" +
                    (resume ? "resume = true\n" : "");
  return spec;
}

// Every rank's state merged into one.
train::CollectedState merged_of(const train::RunResult& result) {
  train::CollectedState all;
  for (const train::CollectedState& s : result.final_state) {
    train::CollectedState copy = s;
    all.merge(std::move(copy));
  }
  return all;
}

void expect_resharded_resume(const std::string& options, int saved_world, int resumed_world) {
  Scratch whole;
  const train::RunResult uninterrupted = run(fsdp_spec(saved_world, options, whole.path(), false));
  ASSERT_EQ(uninterrupted.last_step, 20);

  // Only the step-10 checkpoint, as if the first run had stopped there.
  Scratch cut;
  std::filesystem::copy(whole.path() / "step-00000010", cut.path() / "step-00000010");
  std::ofstream(cut.path() / "latest") << "step-00000010\n";
  const train::RunResult resumed = run(fsdp_spec(resumed_world, options, cut.path(), true));

  EXPECT_EQ(resumed.plan.resume_step, 10);
  EXPECT_EQ(resumed.first_step, 11);
  EXPECT_EQ(resumed.last_step, 20);
  ASSERT_EQ(resumed.final_state.size(), static_cast<size_t>(resumed_world));
  for (size_t r = 1; r < resumed.final_state.size(); ++r) {
    for (const std::string& name : param_names(resumed.final_state[0])) {
      EXPECT_EQ(max_rel_diff(resumed.final_state[r].full(name), resumed.final_state[0].full(name)),
                0.0)
          << "rank " << r << " differs from rank 0 in " << name;
    }
  }
  std::string worst;
  const double diff =
      max_param_rel_diff(resumed.final_state[0], uninterrupted.final_state[0], &worst);
  EXPECT_LE(diff, kTolerance) << "largest difference in " << worst;

  // The new world's optimizer shards together hold every slot of every
  // parameter again.
  EXPECT_EQ(tensor_names(merged_of(resumed)), tensor_names(merged_of(uninterrupted)));
}

TEST(FsdpResume, FullShardTwoRanksToThree) {
  expect_resharded_resume("sharding_strategy = \"full_shard\"", 2, 3);
}

TEST(FsdpResume, HybridShardFourRanksToTwo) {
  expect_resharded_resume("sharding_strategy = \"hybrid_shard\"\nshard_group_size = 2", 4, 2);
}

}  // namespace
}  // namespace tessera::test

// Helpers of the tests that resume a checkpoint at another world size:
// scratch directories, the [checkpoint] table, a checkpoint directory cut
// at one step, and the save-at-N, resume-at-M harness. Shared by the
// strategy tests and the sharded-checkpoint tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "run_support.hpp"

namespace tessera::test {

// A fresh directory under the system temporary directory, removed with its
// contents at the end of the scope. Throws std::filesystem::filesystem_error
// when it cannot be created.
class Scratch {
 public:
  Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::filesystem::path operator/(const std::string& name) const {
    return path_ / name;
  }

 private:
  std::filesystem::path path_;
};

// The [checkpoint] table: `dir`, a checkpoint every `every` steps in
// `format` ("full" or "sharded"), resuming when `resume`.
std::string checkpoint_toml(const std::filesystem::path& dir, int64_t every,
                            const std::string& format, bool resume);

// Copies step directory `step_dir` of checkpoint directory `from` into `to`
// and points `to`'s `latest` at it, as if the run had stopped there.
// Throws std::filesystem::filesystem_error when the copy fails.
void cut_at(const std::filesystem::path& from, const std::filesystem::path& to,
            const std::string& step_dir);

// The two runs of a resume at another world size.
struct ResumedRuns {
  train::RunResult uninterrupted;
  train::RunResult resumed;
};

// Runs `base` for 20 steps on `saved_world` ranks with a checkpoint in
// `format` every 10 steps into `whole`, copies its step-10 checkpoint alone
// into `cut` as if the run had stopped there, and continues it from there
// on `resumed_world` ranks into `out`. Expects (gtest, fatal) the step-10
// checkpoint to exist in `format`, the uninterrupted run to reach step 20,
// the resumed one to restart at step 11 from step 10 and end at step 20 on
// `resumed_world` ranks, and (non-fatal) the resumed ranks to hold every
// tensor, parameters and optimizer slots, the uninterrupted ones held.
// Call it inside ASSERT_NO_FATAL_FAILURE.
void resume_at_other_world(const RunSpec& base, int saved_world, int resumed_world,
                           const std::string& format, const std::filesystem::path& whole,
                           const std::filesystem::path& cut, ResumedRuns* out);

// Saves at step 10 under `first` in `format` ("full" or "sharded"),
// continues from there under `second`, and expects (gtest) the resumed run
// to restart at step 11, end at step 20 with the same tensors, and hold the
// parameters of 20 uninterrupted steps of `first` within kTolerance.
void expect_continues(const RunSpec& first, const RunSpec& second,
                      const std::string& format = "full");

// The chain of three legs: 20 steps of `first` with a full checkpoint
// every 7 steps, `second` resumed from its step 7 (its own checkpoint at
// step 14), `third` resumed from that; expects (gtest) the legs to restart
// at steps 8 and 15 and end at 20, and the last to hold the parameters of
// 20 uninterrupted steps of `first` within kTolerance.
void expect_chain_continues(const RunSpec& first, const RunSpec& second, const RunSpec& third);

}  // namespace tessera::test

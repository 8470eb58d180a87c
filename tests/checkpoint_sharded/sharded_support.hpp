// Helpers of the sharded-checkpoint tests: scratch directories and run
// specifications that checkpoint in format "sharded".
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "run_support.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "tessera/core/train/trainer.hpp"

namespace tessera::test {

// A fresh directory under the system temporary directory, removed with its
// contents at the end of the scope.
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
// `format`, resuming when `resume`.
std::string checkpoint_toml(const std::filesystem::path& dir, int64_t every,
                            const std::string& format, bool resume);

// Options of a strategy for these tests: fsdp with full_shard, nothing for
// the others.
std::string strategy_options_of(const std::string& strategy);

// Every rank's final state merged into one.
train::CollectedState merged_of(const train::RunResult& result);

// Copies step directory `step_dir` of checkpoint directory `from` into `to`
// and points `to`'s `latest` at it, as if the run had stopped there.
void cut_at(const std::filesystem::path& from, const std::filesystem::path& to,
            const std::string& step_dir);

}  // namespace tessera::test

// Helpers of the sharded-checkpoint tests (see sharded_support.hpp).
#include "sharded_support.hpp"

#include <unistd.h>

#include <fstream>
#include <random>
#include <utility>

namespace tessera::test {

Scratch::Scratch() {
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() /
          ("tessera_sharded_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
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

std::string strategy_options_of(const std::string& strategy) {
  return strategy == "fsdp" ? "sharding_strategy = \"full_shard\"" : "";
}

train::CollectedState merged_of(const train::RunResult& result) {
  train::CollectedState all;
  for (const train::CollectedState& s : result.final_state) {
    train::CollectedState copy = s;
    all.merge(std::move(copy));
  }
  return all;
}

void cut_at(const std::filesystem::path& from, const std::filesystem::path& to,
            const std::string& step_dir) {
  std::filesystem::create_directories(to);
  std::filesystem::copy(from / step_dir, to / step_dir);
  std::ofstream(to / "latest") << step_dir << "\n";
}

}  // namespace tessera::test

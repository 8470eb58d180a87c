// Shared helpers of the run-loop tests: the build tree's plugins, configs
// from TOML text, temporary directories, and state comparisons.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../support/error_of.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/core/train/trainer.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {

// The registry over the build tree's plugin directory, scanned once.
const PluginRegistry& plugins();

// The same plus the test fixtures' directory: the process backend
// `train_solo`, the strategy `train_probe` and the selector `pick`.
const PluginRegistry& with_fixtures();

// Whether a strategy plugin of that name was built and loaded.
bool has_strategy(const std::string& name);

// Skips the test, naming the plugin, unless strategy `name` is available.
#define TESSERA_REQUIRE_STRATEGY(name)                                                       \
  do {                                                                                       \
    if (!::tessera::test::has_strategy(name)) {                                              \
      GTEST_SKIP() << "strategy plugin '" << (name) << "' is not built (plugins/strategies/" \
                   << (name) << ")";                                                         \
    }                                                                                        \
  } while (0)

// The config of TOML `text` with `overrides` ("section.key=value").
Config make_config(const std::string& text, const std::vector<std::string>& overrides = {});

// A small mlp run on synthetic clusters: 8 features, hidden [16], 4
// classes, batch 16, adamw lr 0.01, log every step, no checkpoints.
std::string mlp_toml(const std::string& strategy, int world_size, int steps);

// A tiny gpt run on synthetic sequences: 1 layer, d 16, 2 heads, seq 8,
// vocab 32, batch 8, adamw lr 0.01.
std::string gpt_toml(const std::string& strategy, int world_size, int steps);

// A fresh directory removed with its content at the end of the test.
class ScratchDir {
 public:
  ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir();
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::filesystem::path operator/(const std::string& name) const {
    return path_ / name;
  }

 private:
  std::filesystem::path path_;
};

// Expects `a` and `b` to hold the same tensors with bit-identical values.
void expect_same_state(const train::CollectedState& a, const train::CollectedState& b);

// Whole text of a file ("" if it cannot be read).
std::string read_text(const std::filesystem::path& path);

}  // namespace tessera::test

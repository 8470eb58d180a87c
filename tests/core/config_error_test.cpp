// Every kind of config error names the file, the line and the dotted key,
// with a suggestion when the key looks like a typo.
#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config_error.hpp"
#include "tessera/core/config.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

using test::config_error;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "in: " << (haystack)

TEST(ConfigErrors, UnknownKeySuggestsTheNearestKnownKey) {
  const std::string e = config_error("[run]\nsteps = 3\nwrld_size = 4\n");
  EXPECT_EQ(e, "run.toml:3: unknown key 'run.wrld_size' (did you mean 'world_size'?)");
}

TEST(ConfigErrors, SwappedLettersStillGetASuggestion) {
  EXPECT_HAS(config_error("[optimizer]\nrl = 0.1\n"), "(did you mean 'lr'?)");
  EXPECT_HAS(config_error("[run]\nstpes = 1\n"),
             "run.toml:2: unknown key 'run.stpes' (did you mean 'steps'?)");
}

TEST(ConfigErrors, UnknownKeyFarFromAnyKnownKeyHasNoSuggestion) {
  EXPECT_EQ(config_error("[data]\n\nshuffle_buffer = 4\n"),
            "run.toml:3: unknown key 'data.shuffle_buffer'");
}

TEST(ConfigErrors, UnknownSectionSuggestsTheNearestSection) {
  EXPECT_EQ(config_error("[optimiser]\nlr = 0.1\n"),
            "run.toml:1: unknown section 'optimiser' (did you mean 'optimizer'?)");
}

TEST(ConfigErrors, KeyOutsideAnySectionPointsToItsSection) {
  EXPECT_EQ(config_error("steps = 5\n[run]\n"),
            "run.toml:1: unknown key 'steps' outside any section (did you mean 'run.steps'?)");
}

// Keys the rest of the section makes meaningless are refused rather than
// ignored: the run would otherwise differ from what the file says.
TEST(ConfigErrors, KeysWithoutEffectAreRefused) {
  EXPECT_EQ(config_error("[data]\npath = \"/usr/share/common-licenses/GPL-3\"\n"),
            "run.toml:2: 'data.path' is set, but 'data.kind' = 'synthetic' (the default) reads no "
            "file: set data.kind = \"text\" (bytes) or \"tokens\" (token ids)");
  EXPECT_HAS(config_error("[data]\nkind = \"synthetic\"\npath = \"x\"\n"),
             "'data.kind' = 'synthetic' reads no file");
  EXPECT_EQ(config_error("[data]\nkind = \"text\"\npath = \"x\"\ntoken_bytes = 4\n"),
            "run.toml:4: 'data.token_bytes' applies to data.kind = 'tokens' only, but "
            "'data.kind' = 'text'");
  EXPECT_EQ(config_error("[optimizer]\nname = \"sgd\"\nmomentum = 0.9\n"),
            "run.toml:3: 'optimizer.momentum' is not used by optimizer 'sgd' (plain SGD): for "
            "SGD with momentum use optimizer.name = \"momentum\"");
  EXPECT_HAS(config_error("[optimizer]\nmomentum = 0.5\n"),
             "'optimizer.momentum' is not used by optimizer 'adamw' (the Adam rules take beta1, "
             "beta2 and eps)");
  EXPECT_HAS(config_error("[optimizer]\nname = \"momentum\"\nbeta2 = 0.99\neps = 1e-6\n"),
             "'optimizer.beta2' is not used by optimizer 'momentum' (only adam and adamw take it)");
}

TEST(ConfigErrors, WrongTypesNameTheExpectedAndTheGivenType) {
  EXPECT_EQ(config_error("[run]\nsteps = \"ten\"\n"),
            "run.toml:2: 'run.steps' must be an integer, got a string");
  EXPECT_EQ(config_error("[run]\n\nsteps = 10.0\n"),
            "run.toml:3: 'run.steps' must be an integer, got a float");
  EXPECT_EQ(config_error("[optimizer]\nlr = \"fast\"\n"),
            "run.toml:2: 'optimizer.lr' must be a number, got a string");
  EXPECT_EQ(config_error("[checkpoint]\nresume = 1\n"),
            "run.toml:2: 'checkpoint.resume' must be a boolean (true or false), got an integer");
  EXPECT_EQ(config_error("[plugins]\npaths = \"./p\"\n"),
            "run.toml:2: 'plugins.paths' must be an array of strings, got a string");
  EXPECT_EQ(config_error("[plugins]\nallow = [\"a\", 3]\n"),
            "run.toml:2: 'plugins.allow' must contain only strings, got an integer");
  EXPECT_EQ(config_error("run = 3\n"), "run.toml:1: 'run' must be a table ([run]), got an integer");
  EXPECT_EQ(config_error("[backend]\noptions = 3\n"),
            "run.toml:2: 'backend.options' must be a table, got an integer");
}

TEST(ConfigErrors, RangesAreCheckedWithTheLine) {
  EXPECT_EQ(config_error("[run]\nworld_size = 0\n"),
            "run.toml:2: 'run.world_size' must be between 1 and 2147483647, got 0");
  EXPECT_EQ(config_error("[run]\nsteps = -1\n"), "run.toml:2: 'run.steps' must be >= 0, got -1");
  EXPECT_EQ(config_error("[run]\nlog_every = 0\n"),
            "run.toml:2: 'run.log_every' must be >= 1, got 0");
  EXPECT_EQ(config_error("[run]\nseed = -5\n"), "run.toml:2: 'run.seed' must be >= 0, got -5");
  EXPECT_EQ(config_error("[run]\nthreads_per_rank = 0\n"),
            "run.toml:2: 'run.threads_per_rank' must be >= 1, got 0");
  EXPECT_EQ(config_error("[run]\nthreads_per_rank = 5000\n"),
            "run.toml:2: 'run.threads_per_rank' must be at most 1024; got 5000");
  EXPECT_EQ(config_error("[run]\ndevice = \"gpu\"\n"),
            "run.toml:2: 'run.device' must be \"cpu\" or \"cuda\"; got 'gpu'");
  EXPECT_EQ(config_error("[run]\ndevice = \"cuda\"\nprecision = \"f8\"\n"),
            "run.toml:3: 'run.precision' must be \"f32\", \"tf32\", \"bf16\" or \"f16\"; got "
            "'f8'");
  EXPECT_EQ(config_error("[run]\nprecision = \"tf32\"\n"),
            "run.toml:2: 'run.precision' \"tf32\" needs run.device = \"cuda\" (the CPU units "
            "compute in f32)");
  EXPECT_EQ(config_error("[run]\ndevice = \"cuda\"\nprecision = \"tf32\"\nloss_scale = 128\n"),
            "run.toml:4: 'run.loss_scale' applies to run.precision = \"f16\" only");
  EXPECT_EQ(config_error("[run]\nprecision = \"f16\"\n"),
            "run.toml:2: 'run.precision' \"f16\" needs run.device = \"cuda\" (the CPU units "
            "compute in f32)");
  EXPECT_EQ(config_error("[run]\ndevice = \"cuda\"\nprecision = \"f16\"\nloss_scale = 0.5\n"),
            "run.toml:4: 'run.loss_scale' must be >= 1.0, got 0.5");
  EXPECT_EQ(config_error("[run]\ndevice = \"cuda\"\nprecision = \"bf16\"\nloss_scale = 128\n"),
            "run.toml:4: 'run.loss_scale' applies to run.precision = \"f16\" only");
  EXPECT_EQ(config_error("[run]\ndevice = \"cuda\"\nprecision = \"f16\"\nloss_scale_window = 0\n"),
            "run.toml:4: 'run.loss_scale_window' must be >= 1, got 0");
  EXPECT_EQ(config_error("[run]\nprecision = \"bf16\"\n"),
            "run.toml:2: 'run.precision' \"bf16\" needs run.device = \"cuda\" (the CPU units "
            "compute in f32)");
  EXPECT_EQ(config_error("[backend]\ntimeout_s = 0\n"),
            "run.toml:2: 'backend.timeout_s' must be > 0.0, got 0.0");
  EXPECT_EQ(config_error("[data]\nbatch_size = 0\n"),
            "run.toml:2: 'data.batch_size' must be >= 1, got 0");
  EXPECT_EQ(config_error("[optimizer]\nlr = -0.5\n"),
            "run.toml:2: 'optimizer.lr' must be > 0.0, got -0.5");
  EXPECT_EQ(config_error("[optimizer]\nbeta2 = 1\n"),
            "run.toml:2: 'optimizer.beta2' must be in [0, 1), got 1.0");
  EXPECT_EQ(config_error("[checkpoint]\nevery = -1\n"),
            "run.toml:2: 'checkpoint.every' must be >= 0, got -1");
}

TEST(ConfigErrors, FloatsMustBeFinite) {
  EXPECT_EQ(config_error("[optimizer]\nlr = inf\n"),
            "run.toml:2: 'optimizer.lr' must be a finite number, got inf");
  EXPECT_EQ(config_error("[optimizer]\neps = nan\n"),
            "run.toml:2: 'optimizer.eps' must be a finite number, got nan");
  EXPECT_EQ(config_error("[optimizer]\nweight_decay = -inf\n"),
            "run.toml:2: 'optimizer.weight_decay' must be a finite number, got -inf");
  EXPECT_EQ(config_error("[optimizer]\ngrad_clip = +inf\n"),
            "run.toml:2: 'optimizer.grad_clip' must be a finite number, got inf");
  EXPECT_EQ(config_error("[optimizer]\nbeta1 = nan\n"),
            "run.toml:2: 'optimizer.beta1' must be a finite number, got nan");
}

// A dead peer must turn into an error, so a timeout is finite and at most 7
// days; inf once became a 1 ms timeout.
TEST(ConfigErrors, TimeoutIsPositiveAndAtMostSevenDays) {
  const std::string why = ": a dead peer must become an error after a timeout";
  EXPECT_EQ(config_error("[backend]\ntimeout_s = inf\n"),
            "run.toml:2: 'backend.timeout_s' must be <= 604800.0 (7 days), got inf" + why);
  EXPECT_EQ(config_error("[backend]\ntimeout_s = 1e16\n"),
            "run.toml:2: 'backend.timeout_s' must be <= 604800.0 (7 days), got 1e+16" + why);
  EXPECT_EQ(config_error("[backend]\ntimeout_s = 604800.5\n"),
            "run.toml:2: 'backend.timeout_s' must be <= 604800.0 (7 days), got 604800.5" + why);
  EXPECT_EQ(config_error("[backend]\ntimeout_s = nan\n"),
            "run.toml:2: 'backend.timeout_s' must be a number of seconds, got nan");
  EXPECT_EQ(config_error("[backend]\ntimeout_s = -inf\n"),
            "run.toml:2: 'backend.timeout_s' must be > 0.0, got -inf");
  EXPECT_DOUBLE_EQ(parse_config("[backend]\ntimeout_s = 604800\n", "run.toml").backend.timeout_s,
                   604800.0);
  EXPECT_EQ(timeout_ms(604800.0, "backend.timeout_s"), std::chrono::milliseconds(604800000));
  EXPECT_EQ(timeout_ms(1e-6, "backend.timeout_s"), std::chrono::milliseconds(1));
  try {
    (void)timeout_ms(std::numeric_limits<double>::infinity(), "backend.timeout_s");
    ADD_FAILURE() << "an infinite timeout was converted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "backend.timeout_s = inf is not a timeout a backend can wait: it must be > 0 and "
              "at most 604800.0 seconds (7 days)");
  }
}

TEST(ConfigErrors, IntegersOutOfRangeInTheFileAreSyntaxErrors) {
  const std::string e = config_error("[run]\nsteps = 99999999999999999999\n");
  EXPECT_EQ(e.rfind("run.toml:2:", 0), 0U) << e;
}

TEST(ConfigErrors, ValuesOutsideTheirSetListTheChoices) {
  EXPECT_EQ(config_error("[data]\nkind = \"synthtic\"\n"),
            "run.toml:2: 'data.kind' must be one of synthetic, text, tokens; got 'synthtic' "
            "(did you mean 'synthetic'?)");
  EXPECT_EQ(config_error("[optimizer]\nname = \"momentom\"\n"),
            "run.toml:2: 'optimizer.name' must be one of sgd, momentum, adam, adamw; got "
            "'momentom' (did you mean 'momentum'?)");
  EXPECT_EQ(config_error("[checkpoint]\nformat = \"zip\"\n"),
            "run.toml:2: 'checkpoint.format' must be one of full, sharded; got 'zip'");
  EXPECT_EQ(config_error("[run]\nlog_level = \"verbose\"\n"),
            "run.toml:2: 'run.log_level' must be one of trace, debug, info, warn, error, "
            "critical, off; got 'verbose'");
}

TEST(ConfigErrors, PluginNamesMustBeNames) {
  EXPECT_EQ(config_error("[strategy]\nname = \"Data Parallel\"\n"),
            "run.toml:2: 'strategy.name' must be a name made of a-z, 0-9 and '_', got "
            "'Data Parallel'");
  EXPECT_EQ(config_error("[compression]\n[compression.options]\nratio = 0.1\n"),
            "run.toml:1: [compression] needs a 'name' (or remove the section)");
}

TEST(ConfigErrors, DependentKeysAreChecked) {
  EXPECT_EQ(config_error("[data]\nkind = \"text\"\n"),
            "run.toml:2: 'data.kind' = 'text' needs 'data.path'");

  EXPECT_EQ(config_error("[checkpoint]\nresume = true\n"),
            "run.toml:2: 'checkpoint.resume' = true needs 'checkpoint.dir'");
}

TEST(ConfigErrors, SyntaxErrorsGiveLineAndColumn) {
  const std::string e = config_error("[run]\nsteps = = 3\n");
  EXPECT_EQ(e.rfind("run.toml:2:", 0), 0u) << e;
  const std::string dup = config_error("[run]\nsteps = 1\nsteps = 2\n");
  EXPECT_EQ(dup.rfind("run.toml:3:", 0), 0u) << dup;
}

TEST(ConfigErrors, AllProblemsAreReportedInFileOrder) {
  const std::string e = config_error("[run]\nsteps = -1\nwrld_size = 2\n[data]\nbatch_size = 0\n");
  EXPECT_EQ(e,
            "run.toml:2: 'run.steps' must be >= 0, got -1\n"
            "run.toml:3: unknown key 'run.wrld_size' (did you mean 'world_size'?)\n"
            "run.toml:5: 'data.batch_size' must be >= 1, got 0");
}

TEST(ConfigErrors, ModelAcceptsAnyOtherKeyButChecksItsOwn) {
  EXPECT_NO_THROW((void)parse_config("[model]\nanything_at_all = 1\n", "run.toml"));
  EXPECT_EQ(config_error("[model]\nname = 3\n"),
            "run.toml:2: 'model.name' must be a string, got an integer");
  EXPECT_EQ(config_error("[model]\ninit = false\n"),
            "run.toml:2: 'model.init' must be a string, got a boolean");
}

}  // namespace
}  // namespace tessera

// --set overrides: values parsed as TOML literals (else strings), option
// sub-tables and model parameters, and errors that name the override.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config_error.hpp"
#include "tessera/core/config.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

constexpr const char* kBase = R"([run]
world_size = 2
steps = 10

[strategy]
name = "ddp"
[strategy.options]
bucket_mb = 25
)";

Config with(std::vector<std::string> overrides, const std::string& text = kBase) {
  return parse_config(text, "run.toml", overrides);
}

// The message of the error the overrides of `text` raise.
std::string override_error(const std::vector<std::string>& overrides,
                           const std::string& text = kBase) {
  return test::config_error(text, overrides);
}

TEST(ConfigOverrides, ReplaceValuesOfAnyType) {
  const Config c =
      with({"run.steps=500", "run.world_size = 8", "optimizer.lr=1e-3", "checkpoint.resume=true",
            "checkpoint.dir=runs/ck", "plugins.paths=[\"a\", \"b\"]", "run.metrics=\"m.jsonl\""});
  EXPECT_EQ(c.run.steps, 500);
  EXPECT_EQ(c.run.world_size, 8);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_TRUE(c.checkpoint.resume);
  EXPECT_EQ(c.checkpoint.dir, "runs/ck");  // not a TOML literal: taken as a string
  EXPECT_EQ(c.plugins.paths, (std::vector<std::filesystem::path>{"a", "b"}));
  EXPECT_EQ(c.run.metrics, "m.jsonl");
}

TEST(ConfigOverrides, BareWordsAndEmptyValuesAreStrings) {
  const Config c =
      with({"strategy.name=zero2", "run.metrics=", "data.kind=text", "data.path=a b=c"});
  EXPECT_EQ(c.strategy.name, "zero2");
  EXPECT_EQ(c.run.metrics, "");
  EXPECT_EQ(c.data.path, "a b=c");
}

TEST(ConfigOverrides, LaterOverridesWin) {
  EXPECT_EQ(with({"run.steps=1", "run.steps=2"}).run.steps, 2);
}

TEST(ConfigOverrides, ReachOptionSubTables) {
  const Config c = with({"strategy.options.bucket_mb=50", "strategy.options.overlap=false",
                         "backend.options.block_kb=128"});
  EXPECT_EQ(c.strategy.options["bucket_mb"].value<int64_t>(), 50);
  EXPECT_EQ(c.strategy.options["overlap"].value<bool>(), false);
  EXPECT_EQ(c.backend.options["block_kb"].value<int64_t>(), 128);
  EXPECT_EQ(c.backend.name, "inmemory");
}

TEST(ConfigOverrides, CanCreateTheCompressionSection) {
  const Config c = with({"compression.name=int8", "compression.options.chunk=256"});
  ASSERT_TRUE(c.compression.has_value());
  EXPECT_EQ(c.compression->name, "int8");
  EXPECT_EQ(c.compression->options["chunk"].value<int64_t>(), 256);
}

TEST(ConfigOverrides, ModelParametersAreFree) {
  const Config c = with({"model.name=gpt", "model.layers=12", "model.act.kind=relu"});
  EXPECT_EQ(c.model.name, "gpt");
  EXPECT_EQ(c.model.params["layers"].value<int64_t>(), 12);
  EXPECT_EQ(c.model.params["act"]["kind"].value<std::string>(), "relu");
}

TEST(ConfigOverrides, RelativePluginPathsFromOverridesStayAsWritten) {
  const Config c = with({"plugins.paths=[\"rel/dir\"]"});
  ASSERT_EQ(c.plugins.paths.size(), 1u);
  EXPECT_EQ(c.plugins.paths[0], std::filesystem::path("rel/dir"));
}

TEST(ConfigOverrides, UnknownSectionOrKeyNamesTheOverride) {
  EXPECT_EQ(override_error({"optimiser.lr=0.1"}),
            "--set optimiser.lr=0.1: unknown section 'optimiser' (did you mean 'optimizer'?)");
  EXPECT_EQ(override_error({"run.wrld_size=4"}),
            "--set run.wrld_size=4: unknown key 'run.wrld_size' (did you mean 'world_size'?)");
  EXPECT_EQ(override_error({"strategy.bucket_mb=4"}),
            "--set strategy.bucket_mb=4: unknown key 'strategy.bucket_mb'");
}

TEST(ConfigOverrides, MalformedOverridesAreErrors) {
  EXPECT_EQ(override_error({"run.steps"}), "--set run.steps: expected section.key=value");
  EXPECT_EQ(override_error({"steps=3"}), "--set steps=3: expected section.key=value");
  EXPECT_EQ(override_error({"run..steps=3"}), "--set run..steps=3: expected section.key=value");
  EXPECT_EQ(override_error({"run.steps.x=3"}),
            "--set run.steps.x=3: key 'run.steps.x' is too deep; 'run.steps' has no sub-keys");
  EXPECT_EQ(override_error({"backend.options.a.b=3"}),
            "--set backend.options.a.b=3: key 'backend.options.a.b' is too deep; "
            "'backend.options' has no sub-keys");
  EXPECT_EQ(override_error({"model.layers.x=3"}, "[model]\nlayers = 4\n"),
            "--set model.layers.x=3: 'model.layers' is an integer, not a table");
}

TEST(ConfigOverrides, BadValuesNameTheOverrideInsteadOfALine) {
  EXPECT_EQ(override_error({"run.steps=lots"}),
            "--set run.steps=lots: 'run.steps' must be an integer, got a string");
  EXPECT_EQ(override_error({"run.world_size=0"}),
            "--set run.world_size=0: 'run.world_size' must be between 1 and 2147483647, got 0");
  EXPECT_EQ(override_error({"strategy.options=3"}),
            "--set strategy.options=3: 'strategy.options' must be a table, got an integer");
}

// An integer literal beyond 64 bits is not a TOML value; it must not pass
// for a string ("must be an integer, got a string") or be applied.
TEST(ConfigOverrides, IntegersOutOfRangeAreNamedAsSuch) {
  const std::string range =
      " is out of range for an integer (-9223372036854775808 to "
      "9223372036854775807)";
  EXPECT_EQ(override_error({"run.steps=99999999999999999999"}),
            "--set run.steps=99999999999999999999: 'run.steps' = 99999999999999999999" + range);
  EXPECT_EQ(override_error({"run.seed=-9223372036854775809"}),
            "--set run.seed=-9223372036854775809: 'run.seed' = -9223372036854775809" + range);
  EXPECT_EQ(override_error({"model.layers=1_000_000_000_000_000_000_000"}),
            "--set model.layers=1_000_000_000_000_000_000_000: 'model.layers' = "
            "1_000_000_000_000_000_000_000" +
                range);
  EXPECT_EQ(override_error({"backend.options.block_kb=0x1ffffffffffffffff"}),
            "--set backend.options.block_kb=0x1ffffffffffffffff: 'backend.options.block_kb' = "
            "0x1ffffffffffffffff" +
                range);
  // The edges fit; words that are not integers stay strings.
  EXPECT_EQ(with({"run.steps=9223372036854775807"}).run.steps, INT64_MAX);
  EXPECT_EQ(with({"run.seed=0"}).run.seed, 0U);
  EXPECT_EQ(override_error({"run.steps=12abc"}),
            "--set run.steps=12abc: 'run.steps' must be an integer, got a string");
  EXPECT_EQ(with({"checkpoint.dir=99999999999999999999x"}).checkpoint.dir, "99999999999999999999x");
}

TEST(ConfigOverrides, NonFiniteValuesAreRefusedNamingTheOverride) {
  EXPECT_EQ(override_error({"backend.timeout_s=inf"}),
            "--set backend.timeout_s=inf: 'backend.timeout_s' must be <= 604800.0 (7 days), got "
            "inf: a dead peer must become an error after a timeout");
  EXPECT_EQ(override_error({"backend.timeout_s=1e16"}),
            "--set backend.timeout_s=1e16: 'backend.timeout_s' must be <= 604800.0 (7 days), "
            "got 1e+16: a dead peer must become an error after a timeout");
  EXPECT_EQ(override_error({"optimizer.lr=nan"}),
            "--set optimizer.lr=nan: 'optimizer.lr' must be a finite number, got nan");
}

TEST(ConfigOverrides, FileProblemsComeBeforeOverrideProblems) {
  EXPECT_EQ(override_error({"run.steps=-3"}, "[run]\nlog_every = 0\n"),
            "run.toml:2: 'run.log_every' must be >= 1, got 0\n"
            "--set run.steps=-3: 'run.steps' must be >= 0, got -3");
}

TEST(ConfigOverrides, OverriddenValuesAppearInToToml) {
  const Config c = with({"strategy.options.bucket_mb=50", "model.layers=3"});
  const std::string text = to_toml(c);
  EXPECT_NE(text.find("[strategy.options]\nbucket_mb = 50\n"), std::string::npos) << text;
  EXPECT_NE(text.find("layers = 3\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace tessera

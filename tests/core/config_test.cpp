// Loading valid configs: every section and key, defaults, relative plugin
// paths, and to_toml printing something that loads back to the same values.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "../support/temp_dir.hpp"
#include "tessera/core/config.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

constexpr const char* kFullConfig = R"(
[run]
world_size = 4
steps = 200
seed = 7
log_every = 10
metrics = "runs/metrics.jsonl"
log_level = "debug"
threads_per_rank = 3
device = "cuda"
precision = "bf16"

[plugins]
paths = ["./plugins.d", "/opt/tessera/plugins"]
allow = ["inmemory", "ddp"]

[backend]
name = "inmemory"
timeout_s = 30
[backend.options]
block_kb = 64

[strategy]
name = "ddp"
[strategy.options]
bucket_mb = 25
overlap = true

[compression]
name = "topk"
[compression.options]
ratio = 0.01

[model]
name = "gpt"
init = "runs/init.safetensors"
layers = 4
d_model = 128
heads = 4
seq_len = 64

[data]
kind = "tokens"
path = "data/train.bin"
batch_size = 32

[optimizer]
name = "adamw"
lr = 3e-4
weight_decay = 0.01
grad_clip = 1.0
warmup_steps = 10
beta1 = 0.85
beta2 = 0.99
eps = 1e-6

[checkpoint]
dir = "runs/ckpt"
every = 100
resume = true
format = "sharded"
)";

using test::TempDir;

TEST(Config, FullConfigReadsEveryKey) {
  const Config c = parse_config(kFullConfig, "run.toml");
  EXPECT_EQ(c.run.world_size, 4);
  EXPECT_EQ(c.run.steps, 200);
  EXPECT_EQ(c.run.seed, 7u);
  EXPECT_EQ(c.run.log_every, 10);
  EXPECT_EQ(c.run.metrics, "runs/metrics.jsonl");
  EXPECT_EQ(c.run.log_level, "debug");
  EXPECT_EQ(c.run.threads_per_rank, 3);
  EXPECT_EQ(c.run.device, ComputeDevice::cuda);
  EXPECT_EQ(c.run.precision, ComputePrecision::bf16);
  ASSERT_EQ(c.plugins.paths.size(), 2u);
  EXPECT_EQ(c.plugins.paths[0], std::filesystem::path("./plugins.d"));  // parse_config: as written
  EXPECT_EQ(c.plugins.paths[1], std::filesystem::path("/opt/tessera/plugins"));
  EXPECT_EQ(c.plugins.allow, (std::vector<std::string>{"inmemory", "ddp"}));
  EXPECT_EQ(c.backend.name, "inmemory");
  EXPECT_DOUBLE_EQ(c.backend.timeout_s, 30.0);  // an integer where a float is expected
  EXPECT_EQ(c.backend.options["block_kb"].value<int64_t>(), 64);
  EXPECT_EQ(c.backend.options_where, "run.toml: [backend.options]");
  EXPECT_EQ(c.strategy.name, "ddp");
  EXPECT_EQ(c.strategy.options["bucket_mb"].value<int64_t>(), 25);
  EXPECT_EQ(c.strategy.options["overlap"].value<bool>(), true);
  EXPECT_EQ(c.strategy.options_where, "run.toml: [strategy.options]");
  ASSERT_TRUE(c.compression.has_value());
  EXPECT_EQ(c.compression->name, "topk");
  EXPECT_DOUBLE_EQ(c.compression->options["ratio"].value<double>().value_or(0), 0.01);
  EXPECT_EQ(c.model.name, "gpt");
  EXPECT_EQ(c.model.init, "runs/init.safetensors");
  EXPECT_EQ(c.model.params.size(), 4u);
  EXPECT_EQ(c.model.params["layers"].value<int64_t>(), 4);
  EXPECT_EQ(c.model.params["seq_len"].value<int64_t>(), 64);
  EXPECT_FALSE(c.model.params.contains("name"));
  EXPECT_EQ(c.model.params_where, "run.toml: [model]");
  EXPECT_EQ(c.data.kind, "tokens");
  EXPECT_EQ(c.data.path, "data/train.bin");
  EXPECT_EQ(c.data.batch_size, 32);
  EXPECT_EQ(c.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.optimizer.grad_clip, 1.0);
  EXPECT_EQ(c.optimizer.warmup_steps, 10);
  EXPECT_DOUBLE_EQ(parse_config("[optimizer]\nname = \"momentum\"\nmomentum = 0.8\n", "m.toml")
                       .optimizer.momentum,
                   0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.85);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.99);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_EQ(c.checkpoint.dir, "runs/ckpt");
  EXPECT_EQ(c.checkpoint.every, 100);
  EXPECT_TRUE(c.checkpoint.resume);
  EXPECT_EQ(c.checkpoint.format, "sharded");
}

TEST(Config, EmptyTextGivesDefaults) {
  const Config c = parse_config("", "empty.toml");
  const Config defaults;
  EXPECT_EQ(c.run.world_size, defaults.run.world_size);
  EXPECT_EQ(c.run.steps, defaults.run.steps);
  EXPECT_EQ(c.run.seed, defaults.run.seed);
  EXPECT_EQ(c.backend.name, "inmemory");
  EXPECT_DOUBLE_EQ(c.backend.timeout_s, 60.0);
  EXPECT_TRUE(c.backend.options.empty());
  EXPECT_EQ(c.strategy.name, "none");
  EXPECT_FALSE(c.compression.has_value());
  EXPECT_EQ(c.model.name, "mlp");
  EXPECT_TRUE(c.model.params.empty());
  EXPECT_EQ(c.data.kind, "synthetic");
  EXPECT_EQ(c.checkpoint.format, "full");
  EXPECT_TRUE(c.plugins.paths.empty());
  EXPECT_TRUE(c.file.empty());
}

TEST(Config, CompressionNoneMeansNoCompression) {
  const Config c = parse_config("[compression]\nname = \"none\"\n", "run.toml");
  EXPECT_FALSE(c.compression.has_value());
}

TEST(Config, ModelKeepsNestedParameterTables) {
  const Config c = parse_config(
      "[model]\nname = \"mlp\"\nhidden = [64, 32]\n[model.act]\nkind = \"gelu\"\n", "run.toml");
  ASSERT_NE(c.model.params["hidden"].as_array(), nullptr);
  EXPECT_EQ(c.model.params["hidden"][1].value<int64_t>(), 32);
  EXPECT_EQ(c.model.params["act"]["kind"].value<std::string>(), "gelu");
}

TEST(Config, LoadResolvesPluginPathsAgainstTheFileDirectory) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "conf");
  const auto file = dir.write(
      "conf/run.toml", "[plugins]\npaths = [\"./plugins.d\", \"../shared\", \"/abs/dir\"]\n");
  const Config c = load_config(file);
  EXPECT_EQ(c.file, file);
  ASSERT_EQ(c.plugins.paths.size(), 3u);
  EXPECT_EQ(c.plugins.paths[0], dir.path() / "conf" / "plugins.d");
  EXPECT_EQ(c.plugins.paths[1], dir.path() / "shared");
  EXPECT_EQ(c.plugins.paths[2], std::filesystem::path("/abs/dir"));
}

TEST(Config, LoadFullFileNamesItInOptionsWhere) {
  TempDir dir;
  const auto file = dir.write("full.toml", kFullConfig);
  const Config c = load_config(file);
  EXPECT_EQ(c.strategy.options_where, file.string() + ": [strategy.options]");
  EXPECT_EQ(c.plugins.paths[0], dir.path() / "plugins.d");
}

TEST(Config, MissingFileNamesThePath) {
  TempDir dir;
  const auto missing = dir.path() / "nope.toml";
  try {
    (void)load_config(missing);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)load_config(dir.path()), Error);  // a directory
}

// Field-by-field equality of two configs (option tables compared as TOML).
void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.run.world_size, b.run.world_size);
  EXPECT_EQ(a.run.steps, b.run.steps);
  EXPECT_EQ(a.run.seed, b.run.seed);
  EXPECT_EQ(a.run.log_every, b.run.log_every);
  EXPECT_EQ(a.run.metrics, b.run.metrics);
  EXPECT_EQ(a.run.log_level, b.run.log_level);
  EXPECT_EQ(a.run.device, b.run.device);
  EXPECT_EQ(a.run.precision, b.run.precision);
  EXPECT_EQ(a.run.loss_scale, b.run.loss_scale);
  EXPECT_EQ(a.run.loss_scale_window, b.run.loss_scale_window);
  EXPECT_EQ(a.plugins.paths, b.plugins.paths);
  EXPECT_EQ(a.plugins.allow, b.plugins.allow);
  EXPECT_EQ(a.backend.name, b.backend.name);
  EXPECT_EQ(a.backend.timeout_s, b.backend.timeout_s);
  EXPECT_EQ(a.backend.options, b.backend.options);
  EXPECT_EQ(a.strategy.name, b.strategy.name);
  EXPECT_EQ(a.strategy.options, b.strategy.options);
  ASSERT_EQ(a.compression.has_value(), b.compression.has_value());
  if (a.compression) {
    EXPECT_EQ(a.compression->name, b.compression->name);
    EXPECT_EQ(a.compression->options, b.compression->options);
  }
  EXPECT_EQ(a.model.name, b.model.name);
  EXPECT_EQ(a.model.init, b.model.init);
  EXPECT_EQ(a.model.params, b.model.params);
  EXPECT_EQ(a.data.kind, b.data.kind);
  EXPECT_EQ(a.data.path, b.data.path);
  EXPECT_EQ(a.data.batch_size, b.data.batch_size);
  EXPECT_EQ(a.optimizer.name, b.optimizer.name);
  EXPECT_EQ(a.optimizer.lr, b.optimizer.lr);  // exact: printed with round-trip precision
  EXPECT_EQ(a.optimizer.weight_decay, b.optimizer.weight_decay);
  EXPECT_EQ(a.optimizer.grad_clip, b.optimizer.grad_clip);
  EXPECT_EQ(a.optimizer.warmup_steps, b.optimizer.warmup_steps);
  EXPECT_EQ(a.optimizer.momentum, b.optimizer.momentum);
  EXPECT_EQ(a.optimizer.beta1, b.optimizer.beta1);
  EXPECT_EQ(a.optimizer.beta2, b.optimizer.beta2);
  EXPECT_EQ(a.optimizer.eps, b.optimizer.eps);
  EXPECT_EQ(a.checkpoint.dir, b.checkpoint.dir);
  EXPECT_EQ(a.checkpoint.every, b.checkpoint.every);
  EXPECT_EQ(a.checkpoint.resume, b.checkpoint.resume);
  EXPECT_EQ(a.checkpoint.format, b.checkpoint.format);
}

TEST(Config, ToTomlRoundTripsTheFullConfig) {
  const Config first = parse_config(kFullConfig, "run.toml");
  const std::string text = to_toml(first);
  const Config second = parse_config(text, "printed.toml");
  expect_same(first, second);
  EXPECT_EQ(to_toml(second), text);  // printing is stable
}

// f16 on a CUDA run, with its loss scaling read and printed back.
TEST(Config, F16ReadsAndPrintsItsLossScaling) {
  const Config c = parse_config(
      "[run]\ndevice = \"cuda\"\nprecision = \"f16\"\nloss_scale = 1024\nloss_scale_window = "
      "50\n",
      "run.toml");
  EXPECT_EQ(c.run.precision, ComputePrecision::f16);
  EXPECT_EQ(c.run.loss_scale, 1024.0);
  EXPECT_EQ(c.run.loss_scale_window, 50);
  const Config defaults =
      parse_config("[run]\ndevice = \"cuda\"\nprecision = \"f16\"\n", "run.toml");
  EXPECT_EQ(defaults.run.loss_scale, 65536.0);
  EXPECT_EQ(defaults.run.loss_scale_window, 2000);
  const std::string text = to_toml(c);
  EXPECT_NE(text.find("precision = \"f16\""), std::string::npos) << text;
  expect_same(c, parse_config(text, "printed.toml"));
}

// TF32 products on a CUDA run, printed back.
TEST(Config, Tf32IsAPrecisionOfCudaRuns) {
  const Config c = parse_config("[run]\ndevice = \"cuda\"\nprecision = \"tf32\"\n", "run.toml");
  EXPECT_EQ(c.run.precision, ComputePrecision::tf32);
  const std::string text = to_toml(c);
  EXPECT_NE(text.find("precision = \"tf32\""), std::string::npos) << text;
  EXPECT_EQ(text.find("loss_scale"), std::string::npos) << text;
  expect_same(c, parse_config(text, "printed.toml"));
}

TEST(Config, ToTomlPrintsEveryKeyIncludingDefaultsAndEmptyOptions) {
  const Config c = parse_config("", "run.toml");
  const std::string text = to_toml(c);
  for (const char* expected : {"[run]",
                               "world_size = 1",
                               "log_level = \"\"",
                               "[plugins]",
                               "paths = []",
                               "[backend]",
                               "name = \"inmemory\"",
                               "timeout_s = 60.0",
                               "[backend.options]",
                               "[strategy]",
                               "name = \"none\"",
                               "[strategy.options]",
                               "[model]",
                               "init = \"\"",
                               "[data]",
                               "kind = \"synthetic\"",
                               "[optimizer]",
                               "lr = 0.0003",
                               "eps = 1e-08",
                               "[checkpoint]",
                               "format = \"full\"",
                               "resume = false"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << "missing '" << expected << "' in\n"
                                                      << text;
  }
  EXPECT_EQ(text.find("[compression]"), std::string::npos);
  expect_same(c, parse_config(text, "printed.toml"));
}

TEST(Config, ToTomlRoundTripsAwkwardStringsAndNestedParams) {
  const Config first = parse_config(
      "[run]\nmetrics = \"a \\\"quoted\\\"\\tpath\\\\x\"\n"
      "[model]\n\"odd key\" = 1\nlist = [1, 2.5, \"s\", [true]]\n[model.sub]\nx = { y = 1 }\n",
      "run.toml");
  const Config second = parse_config(to_toml(first), "printed.toml");
  expect_same(first, second);
  EXPECT_EQ(second.run.metrics, "a \"quoted\"\tpath\\x");
}

}  // namespace
}  // namespace tessera

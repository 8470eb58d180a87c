// The run configuration: a TOML file (schema in docs/config.md) plus
// `--set section.key=value` overrides. Loading checks every key and type and
// reports errors with the file, line and dotted key.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "tessera/core/device.hpp"

namespace tessera {

// A plugin selection: its name and its own options sub-table (checked later
// against the options the plugin declares, once it is loaded). The table
// keeps the line of each value for messages as long as it is moved, not
// copied (toml++ does not copy source positions).
struct PluginChoice {
  std::string name;
  toml::table options;        // [<section>.options]
  std::string options_where;  // "run.toml: [backend.options]" for errors
};

struct RunSection {
  int world_size = 1;
  int64_t steps = 100;
  uint64_t seed = 42;
  int64_t log_every = 10;
  std::string metrics;    // JSON-lines path; empty: none
  std::string log_level;  // empty: TESSERA_LOG_LEVEL or "info"
  // Memory budget per rank for strategy selection (strategy.name = "auto"),
  // in bytes; 0: detected (docs/strategies/auto.md).
  int64_t memory_per_rank = 0;
  // Threads for one operation of a rank (intra-op parallelism); 0: the
  // cores this process may use divided by the ranks on this node.
  int threads_per_rank = 0;
  // Where each rank computes: the CPU, or a CUDA device per rank.
  ComputeDevice device = ComputeDevice::cpu;
  // The dtype of the models' matrix products; bf16 and f16 need device =
  // cuda.
  ComputePrecision precision = ComputePrecision::f32;
  // f16's dynamic loss scaling: the first scale, and the steps without an
  // overflow after which the scale doubles (docs/training.md, Devices).
  double loss_scale = 65536.0;
  int64_t loss_scale_window = 2000;
};

struct PluginsSection {
  std::vector<std::filesystem::path> paths;  // relative to the config file
  // Where each entry of `paths` was written, for messages: "run.toml:4", or
  // the override's label ("--set plugins.paths=[...]"); may be shorter than
  // `paths` (entries added in code).
  std::vector<std::string> path_sources;
  std::vector<std::string> allow;  // empty: all
};

// The longest timeout a backend operation may be given: 7 days. A dead
// peer must become an error after a timeout, so there is no "never".
inline constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600.0;

// The most threads one rank may use (run.threads_per_rank).
inline constexpr int64_t kMaxThreadsPerRank = 1024;

struct BackendSection : PluginChoice {
  double timeout_s = 60.0;  // > 0 and <= kMaxTimeoutSeconds
  // Compare every collective's fingerprint across the ranks before posting
  // it (docs/training.md, "When ranks disagree"); false: record only.
  bool check_collectives = true;
};

// `seconds` in whole milliseconds (at least 1). Throws tessera::Error
// (invalid argument) naming `what` unless 0 < seconds <= kMaxTimeoutSeconds.
std::chrono::milliseconds timeout_ms(double seconds, const std::string& what);

struct ModelSection {
  std::string name = "mlp";
  std::string init;    // safetensors file with the initial parameters;
                       // empty: the model's own init, seeded by run.seed
  toml::table params;  // every other key of [model], for the model
  std::string params_where;
};

struct DataSection {
  std::string kind = "synthetic";  // synthetic | text | tokens
  std::string path;
  int64_t batch_size = 32;    // global batch
  int64_t micro_batches = 1;  // gradient accumulation steps per optimizer step; each
                              // data-parallel rank splits its slice into this many
  int token_bytes = 2;        // `tokens` files: bytes per id, 2 (u16) or 4 (u32)
};

struct OptimizerSection {
  std::string name = "adamw";
  double lr = 3e-4;
  double weight_decay = 0.0;
  double grad_clip = 0.0;  // 0: off
  int64_t warmup_steps = 0;
  // Where warmup_steps was set ("run.toml:32", "--set optimizer.warmup_steps=5"),
  // for the check against run.steps once the run is planned; empty: default.
  std::string warmup_where;
  double momentum = 0.9;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

struct CheckpointSection {
  std::string dir;    // empty: no checkpoints
  int64_t every = 0;  // 0: only at the end
  bool resume = false;
  std::string format = "full";  // full | sharded
};

struct Config {
  std::filesystem::path file;  // where it was loaded from (may be empty)
  RunSection run;
  PluginsSection plugins;
  BackendSection backend;  // name defaults to "inmemory"
  PluginChoice strategy;   // name defaults to "none"
  std::optional<PluginChoice> compression;
  ModelSection model;
  DataSection data;
  OptimizerSection optimizer;
  CheckpointSection checkpoint;
};

// Reads `file`, applies `overrides` ("section.key=value", value parsed as a
// TOML literal, or taken as a string if it does not parse), and validates.
// Throws tessera::Error naming the file, line and key of each problem (one
// per line, in file order; problems of overrides name the override), and
// naming the file when it is missing, not a regular file (a FIFO, a device,
// a directory: "config file 'x' is a FIFO, not a regular file"), larger
// than 16 MiB, or unreadable (with strerror).
Config load_config(const std::filesystem::path& file, std::span<const std::string> overrides = {});

// The same from TOML text; `name` stands in for the file in messages and
// relative paths resolve against the current directory.
Config parse_config(std::string_view text, const std::string& name,
                    std::span<const std::string> overrides = {});

// The resolved configuration as TOML text (for --dry-run).
std::string to_toml(const Config& config);

}  // namespace tessera

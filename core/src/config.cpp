#include "tessera/core/config.hpp"

#include "tessera/core/byte_size.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config_schema.hpp"
#include "tessera/core/input_file.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/optim/optimizer.hpp"
#include "tessera/sdk/error.hpp"
#include "toml_text.hpp"

namespace tessera {
namespace {

using Problems = detail::Problems;
using Section = detail::Section;

// A config is a few kilobytes; anything near this is not one.
constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;

bool is_plugin_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// Reads `key` as a plugin-style name ([a-z0-9_]+) into `out`.
void read_name(Section& s, std::string_view key, std::string& out) {
  std::string name = out;
  if (s.read(key, name)) {
    s.require(key, is_plugin_name(name),
              "must be a name made of a-z, 0-9 and '_', got '" + name + "'");
  }
  out = std::move(name);
}

// Reads the "<section>.options" sub-table (moved, so lines survive).
void read_options(Section& s, PluginChoice& choice) {
  choice.options_where = s.problems().name() + ": [" + std::string(s.name()) + ".options]";
  if (toml::table* options = s.table("options")) choice.options = std::move(*options);
}

void read_run(Section s, RunSection& run) {
  int64_t world_size = run.world_size;
  if (s.read("world_size", world_size)) {
    s.require(
        "world_size", world_size >= 1 && world_size <= INT_MAX,
        "must be between 1 and " + std::to_string(INT_MAX) + ", got " + std::to_string(world_size));
    run.world_size = static_cast<int>(std::clamp<int64_t>(world_size, 1, INT_MAX));
  }
  if (s.read("steps", run.steps)) s.at_least("steps", run.steps, 0);
  int64_t seed = static_cast<int64_t>(run.seed);
  if (s.read("seed", seed)) {
    s.at_least("seed", seed, 0);
    run.seed = static_cast<uint64_t>(seed);
  }
  if (s.read("log_every", run.log_every)) s.at_least("log_every", run.log_every, 1);
  s.read("metrics", run.metrics);
  if (s.read("log_level", run.log_level) && !run.log_level.empty()) {
    s.require("log_level", parse_log_level(run.log_level).has_value(),
              "must be one of trace, debug, info, warn, error, critical, off; got '" +
                  run.log_level + "'");
  }
  std::string memory;
  if (s.read("memory_per_rank", memory)) {
    const std::optional<int64_t> bytes = parse_memory_size(memory);
    s.require("memory_per_rank", bytes.has_value(),
              "must be " + memory_size_hint() + "; got '" + memory + "'");
    run.memory_per_rank = bytes.value_or(0);
  }
  int64_t threads = 0;
  if (s.read("threads_per_rank", threads)) {
    s.at_least("threads_per_rank", threads, 1);
    s.require("threads_per_rank", threads <= kMaxThreadsPerRank,
              "must be at most " + std::to_string(kMaxThreadsPerRank) + "; got " +
                  std::to_string(threads));
    run.threads_per_rank = static_cast<int>(threads);
  }
  std::string device;
  if (s.read("device", device)) {
    s.require("device", device == "cpu" || device == "cuda",
              "must be \"cpu\" or \"cuda\"; got '" + device + "'");
    run.device = device == "cuda" ? ComputeDevice::cuda : ComputeDevice::cpu;
  }
  std::string precision;
  if (s.read("precision", precision)) {
    s.require(
        "precision",
        precision == "f32" || precision == "tf32" || precision == "bf16" || precision == "f16",
        "must be \"f32\", \"tf32\", \"bf16\" or \"f16\"; got '" + precision + "'");
    run.precision = precision == "tf32"   ? ComputePrecision::tf32
                    : precision == "bf16" ? ComputePrecision::bf16
                    : precision == "f16"  ? ComputePrecision::f16
                                          : ComputePrecision::f32;
    s.require("precision",
              run.precision == ComputePrecision::f32 || run.device == ComputeDevice::cuda,
              "\"" + precision + "\" needs run.device = \"cuda\" (the CPU units compute in f32)");
  }
  // f16's loss scaling; set for another precision it would do nothing.
  const bool f16 = run.precision == ComputePrecision::f16;
  if (s.read("loss_scale", run.loss_scale)) {
    s.at_least("loss_scale", run.loss_scale, 1.0);
    s.require("loss_scale", f16, "applies to run.precision = \"f16\" only");
  }
  if (s.read("loss_scale_window", run.loss_scale_window)) {
    s.at_least("loss_scale_window", run.loss_scale_window, 1);
    s.require("loss_scale_window", f16, "applies to run.precision = \"f16\" only");
  }
}

// Paths written in the file are relative to the file's directory; paths
// given by --set (or in parse_config text) are kept as written.
void read_plugins(Section s, PluginsSection& plugins, const std::filesystem::path& base) {
  std::vector<std::pair<std::string, const toml::node*>> paths;
  if (s.read_strings("paths", paths)) {
    plugins.paths.clear();
    plugins.path_sources.clear();
    for (const auto& [text, node] : paths) {
      std::filesystem::path path(text);
      const bool from_override = detail::from_override(*node);
      if (path.is_relative() && !base.empty() && !from_override) {
        path = (base / path).lexically_normal();
      }
      plugins.paths.push_back(std::move(path));
      const uint32_t line = detail::node_line(*node);
      plugins.path_sources.push_back(
          from_override ? detail::override_label(*node)
                        : s.problems().name() + (line > 0 ? ":" + std::to_string(line) : ""));
    }
  }
  std::vector<std::pair<std::string, const toml::node*>> allow;
  if (s.read_strings("allow", allow)) {
    plugins.allow.clear();
    for (const auto& [name, node] : allow) {
      if (!is_plugin_name(name)) {
        s.problems().add(node, "'plugins.allow' entries must be plugin names, got '" + name + "'");
      }
      plugins.allow.push_back(name);
    }
  }
}

void read_backend(Section s, BackendSection& backend) {
  read_name(s, "name", backend.name);
  double timeout = backend.timeout_s;
  if (s.read_number("timeout_s", timeout)) {
    if (std::isnan(timeout)) {
      s.require("timeout_s", false, "must be a number of seconds, got nan");
    } else if (timeout <= 0.0) {
      s.above("timeout_s", timeout, 0.0);
    } else {
      s.require("timeout_s", timeout <= kMaxTimeoutSeconds,
                "must be <= " + detail::format_float(kMaxTimeoutSeconds) + " (7 days), got " +
                    detail::format_float(timeout) +
                    ": a dead peer must become an error after a timeout");
    }
    backend.timeout_s = timeout;
  }
  s.read("check_collectives", backend.check_collectives);
  read_options(s, backend);
}

void read_strategy(Section s, PluginChoice& strategy) {
  read_name(s, "name", strategy.name);
  read_options(s, strategy);
}

// [compression] is optional; name "none" means no compression.
void read_compression(Section s, std::optional<PluginChoice>& compression) {
  if (s.table() == nullptr) return;  // not a table: already reported
  PluginChoice choice;
  if (s.get("name") == nullptr) {
    s.problems().add(s.node(), "[compression] needs a 'name' (or remove the section)");
  }
  read_name(s, "name", choice.name);
  read_options(s, choice);
  if (choice.name == "none") {
    compression.reset();
  } else {
    compression = std::move(choice);
  }
}

// Known keys are read; every other key of [model] is moved into params.
void read_model(Section s, ModelSection& model) {
  read_name(s, "name", model.name);
  s.read("init", model.init);
  model.params_where = s.problems().name() + ": [model]";
  if (toml::table* table = s.table()) {
    for (auto& [key, node] : *table) {
      if (key.str() != "name" && key.str() != "init") {
        model.params.insert_or_assign(key.str(), std::move(node));
      }
    }
  }
}

void read_data(Section s, DataSection& data) {
  if (s.read("kind", data.kind)) {
    s.one_of("kind", data.kind, {"synthetic", "text", "tokens"});
  }
  const bool path_given = s.read("path", data.path);
  if (s.read("batch_size", data.batch_size)) s.at_least("batch_size", data.batch_size, 1);
  if (s.read("micro_batches", data.micro_batches)) {
    s.at_least("micro_batches", data.micro_batches, 1);
    s.require("micro_batches", data.micro_batches <= data.batch_size,
              "= " + std::to_string(data.micro_batches) + " must not exceed 'data.batch_size' = " +
                  std::to_string(data.batch_size) + " (every micro-batch needs an example)");
  }
  int64_t token_bytes = data.token_bytes;
  if (s.read("token_bytes", token_bytes)) {
    s.require("token_bytes", token_bytes == 2 || token_bytes == 4,
              "must be 2 (u16 ids) or 4 (u32 ids), got " + std::to_string(token_bytes));
    data.token_bytes = token_bytes == 4 ? 4 : 2;
    if (token_bytes == 2 || token_bytes == 4) {
      s.require("token_bytes", data.kind == "tokens",
                "applies to data.kind = 'tokens' only, but 'data.kind' = '" + data.kind + "'");
    }
  }
  if ((data.kind == "text" || data.kind == "tokens") && data.path.empty()) {
    s.problems().add(s.get("kind") != nullptr ? s.get("kind") : s.node(),
                     "'data.kind' = '" + data.kind + "' needs 'data.path'");
  }
  // A file named for synthetic data would be ignored: the run would train
  // on generated examples without a word.
  if (path_given && !data.path.empty() && data.kind == "synthetic") {
    s.require("path", false,
              "is set, but 'data.kind' = 'synthetic'" +
                  std::string(s.get("kind") == nullptr ? " (the default)" : "") +
                  " reads no file: set data.kind = \"text\" (bytes) or \"tokens\" (token ids)");
  }
}

void read_optimizer(Section s, OptimizerSection& opt) {
  if (s.read("name", opt.name)) {
    const std::vector<std::string>& names = optimizer_names();
    s.one_of("name", opt.name, std::vector<std::string_view>(names.begin(), names.end()));
  }
  if (s.read("lr", opt.lr)) s.above("lr", opt.lr, 0.0);
  if (s.read("weight_decay", opt.weight_decay)) s.at_least("weight_decay", opt.weight_decay, 0.0);
  if (s.read("grad_clip", opt.grad_clip)) s.at_least("grad_clip", opt.grad_clip, 0.0);
  if (s.read("warmup_steps", opt.warmup_steps)) {
    s.at_least("warmup_steps", opt.warmup_steps, 0);
    opt.warmup_where = s.where("warmup_steps");
  }
  for (const auto& [key, value] :
       {std::pair{"momentum", &opt.momentum}, std::pair{"beta1", &opt.beta1},
        std::pair{"beta2", &opt.beta2}}) {
    if (s.read(key, *value)) {
      s.require(key, *value >= 0.0 && *value < 1.0,
                "must be in [0, 1), got " + detail::format_float(*value));
    }
  }
  if (s.read("eps", opt.eps)) s.above("eps", opt.eps, 0.0);
  // A key the rule does not read would be silently without effect (sgd
  // with momentum = 0.9 would still be plain SGD).
  const bool adam = opt.name == "adam" || opt.name == "adamw";
  const bool sgd = opt.name == "sgd" || opt.name == "momentum";
  if (s.get("momentum") != nullptr && (adam || opt.name == "sgd")) {
    s.require("momentum", false,
              "is not used by optimizer '" + opt.name + "'" +
                  (adam ? std::string(" (the Adam rules take beta1, beta2 and eps)")
                        : std::string(" (plain SGD): for SGD with momentum use "
                                      "optimizer.name = \"momentum\"")));
  }
  for (const char* key : {"beta1", "beta2", "eps"}) {
    if (s.get(key) != nullptr && sgd) {
      s.require(key, false,
                "is not used by optimizer '" + opt.name + "' (only adam and adamw take it)");
    }
  }
}

void read_checkpoint(Section s, CheckpointSection& ckpt) {
  s.read("dir", ckpt.dir);
  if (s.read("every", ckpt.every)) s.at_least("every", ckpt.every, 0);
  s.read("resume", ckpt.resume);
  if (s.read("format", ckpt.format)) s.one_of("format", ckpt.format, {"full", "sharded"});
  if (ckpt.resume && ckpt.dir.empty()) {
    s.problems().add(s.get("resume"), "'checkpoint.resume' = true needs 'checkpoint.dir'");
  }
}

toml::table parse_text(std::string_view text, const std::string& name) {
  try {
    return toml::parse(text, std::string_view(name));
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, name + ":" + std::to_string(where.line) + ":" +
                                                  std::to_string(where.column) + ": " +
                                                  std::string(e.description()));
  }
}

// Parses, applies overrides, validates; `base` is the directory that
// relative plugin paths of the file resolve against (empty: as written).
Config build(std::string_view text, const std::string& name, const std::filesystem::path& base,
             std::span<const std::string> overrides) {
  toml::table root = parse_text(text, name);
  Problems problems(name);
  for (const std::string& assignment : overrides) {
    detail::apply_override(root, assignment, problems);
  }
  detail::check_unknown_keys(root, problems);

  Config config;
  config.backend.name = "inmemory";
  config.strategy.name = "none";
  read_run(Section(problems, root, "run"), config.run);
  read_plugins(Section(problems, root, "plugins"), config.plugins, base);
  read_backend(Section(problems, root, "backend"), config.backend);
  read_strategy(Section(problems, root, "strategy"), config.strategy);
  if (root.contains("compression")) {
    read_compression(Section(problems, root, "compression"), config.compression);
  }
  read_model(Section(problems, root, "model"), config.model);
  read_data(Section(problems, root, "data"), config.data);
  read_optimizer(Section(problems, root, "optimizer"), config.optimizer);
  read_checkpoint(Section(problems, root, "checkpoint"), config.checkpoint);
  problems.throw_if_any();
  return config;
}

}  // namespace

std::chrono::milliseconds timeout_ms(double seconds, const std::string& what) {
  if (!(seconds > 0.0 && seconds <= kMaxTimeoutSeconds)) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                what + " = " + detail::format_float(seconds) +
                    " is not a timeout a backend can wait: it must be > 0 and at most " +
                    detail::format_float(kMaxTimeoutSeconds) + " seconds (7 days)");
  }
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(seconds * 1000.0)));
}

Config load_config(const std::filesystem::path& file, std::span<const std::string> overrides) {
  const std::string name = file.string();
  const std::string text = read_input_file(file, "config file", kMaxConfigBytes);
  Config config = build(text, name, file.parent_path(), overrides);
  config.file = file;
  return config;
}

Config parse_config(std::string_view text, const std::string& name,
                    std::span<const std::string> overrides) {
  return build(text, name, {}, overrides);
}

}  // namespace tessera

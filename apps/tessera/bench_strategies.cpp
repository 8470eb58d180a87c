#include "bench_strategies.hpp"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <system_error>

#include <fmt/format.h>

#include "bench_strategies_child.hpp"
#include "bench_strategies_metrics.hpp"
#include "bench_strategies_report.hpp"
#include "cli_error.hpp"
#include "plugins_command.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/train/trainer.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {
namespace {

constexpr int kStderrTailLines = 20;

// A private scratch directory for the children's files, removed with its
// contents when the command ends.
class ScratchDir {
 public:
  ScratchDir() {
    std::error_code ec;
    std::filesystem::path base = std::filesystem::temp_directory_path(ec);
    if (ec) base = "/tmp";
    std::string pattern = (base / "tessera-bench-strategies-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw Error(TESSERA_ERR_INTERNAL, fmt::format("cannot create a scratch directory in '{}': {}",
                                                    base.string(), std::strerror(errno)));
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

// `text` as a TOML basic string.
std::string toml_string(const std::string& text) {
  std::string quoted = "\"";
  for (const char ch : text) {
    if (ch == '"' || ch == '\\') quoted += '\\';
    quoted += ch;
  }
  return quoted + '"';
}

// `value` as TOML: kept when it is a number, boolean, array or string,
// quoted as a string otherwise (schedule=gpipe).
std::string toml_value(const std::string& value) {
  if (value == "true" || value == "false") return value;
  if (!value.empty() && (value.front() == '[' || value.front() == '"')) return value;
  const bool number = !value.empty() &&
                      value.find_first_not_of("+-0123456789.eE_") == std::string::npos &&
                      value.find_first_of("0123456789") != std::string::npos;
  return number ? value : toml_string(value);
}

std::string join(const std::vector<std::string>& names) {
  return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
}

// The path this process was started from, for re-running it.
std::string self_executable() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    throw Error(TESSERA_ERR_INTERNAL,
                "cannot find this executable through /proc/self/exe: " + ec.message());
  }
  return self.string();
}

// Every name must be a strategy plugin of the registry.
void check_names(const std::vector<std::string>& names, const PluginRegistry& registry) {
  const std::vector<std::string> available = registry.names(TESSERA_KIND_STRATEGY);
  for (const auto& name : names) {
    if (std::find(available.begin(), available.end(), name) == available.end()) {
      throw UsageError("unknown strategy '" + name + "' in --strategies (available strategy " +
                       "plugins: " + join(available) + ")");
    }
  }
}

void check_thread_backend(const Config& config, const PluginRegistry& registry) {
  const auto plugin = registry.get(TESSERA_KIND_BACKEND, config.backend.name);
  if ((backend_capabilities(plugin->descriptor()) & TESSERA_BACKEND_CAP_THREAD_RANKS) == 0) {
    throw UsageError(
        "bench strategies runs each strategy as one process of thread ranks; "
        "backend '" +
        config.backend.name + "' runs one rank per process (use e.g. inmemory)");
  }
}

// One planned strategy: its overrides and plan, or why it cannot run.
struct Planned {
  std::string name;                    // the --strategies entry, the row's label
  std::string stem;                    // its files in the scratch directory
  std::vector<std::string> overrides;  // the user's, then child_overrides
  train::RunPlan plan;
  std::string refused;  // non-empty: plan_run's message
};

// Runs one strategy in a child process and reads back its metrics.
StrategyRow run_one(const Planned& p, const GlobalOptions& global, const std::string& exe,
                    const std::string& config, const std::filesystem::path& dir,
                    const std::filesystem::path& metrics) {
  std::vector<std::string> argv{exe};
  for (const auto& path : global.plugin_paths) argv.insert(argv.end(), {"--plugin-path", path});
  if (!global.log_level.empty()) argv.insert(argv.end(), {"--log-level", global.log_level});
  argv.insert(argv.end(), {"train", config});
  for (const auto& o : p.overrides) argv.insert(argv.end(), {"--set", o});

  const std::filesystem::path err = dir / (p.stem + ".stderr");
  const ChildOutcome outcome = run_child(argv, dir / (p.stem + ".stdout"), err);
  StrategyRow row{p.name, false, {}, outcome.max_rss_kib};
  std::string why;
  if (outcome.ok()) {
    try {
      row.measure = summarize_metrics_file(metrics);
      row.ok = true;
    } catch (const Error& e) {
      why = e.what();
    }
  } else {
    why = outcome.describe();
  }
  if (!row.ok) {
    std::cerr << "tessera: bench strategies: '" << p.name << "' failed (" << why
              << "); the last lines of its standard error:\n";
    const std::string tail = file_tail(err, kStderrTailLines);
    std::cerr << (tail.empty() ? std::string("(nothing)\n") : tail) << std::flush;
  }
  return row;
}

}  // namespace

CLI::App* add_bench_strategies_command(CLI::App& bench, BenchStrategiesArgs& args) {
  CLI::App* cmd = bench.add_subcommand(
      "strategies",
      "Run one configuration under several strategies, each in its own process, and compare "
      "step time, bytes sent and peak memory");
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("CONFIG", args.config, "Run configuration (TOML); see docs/config.md")
      ->type_name("FILE")
      ->required();
  cmd->add_option("--strategies", args.strategies,
                  "Comma-separated strategy plugins, e.g. ddp,zero1,zero2,zero3,fsdp; "
                  "NAME:KEY=VALUE[:KEY=VALUE...] sets options of that run, e.g. "
                  "pipeline:schedule=gpipe,pipeline:schedule=1f1b")
      ->type_name("LIST")
      ->required();
  add_set_option(cmd, args.overrides,
                 "Override one key of the configuration for every strategy (repeatable)");
  cmd->add_option("--steps", args.steps, "Training steps per strategy")->capture_default_str();
  cmd->add_option("--csv", args.csv, "Also write the rows as CSV to FILE")->type_name("FILE");
  return cmd;
}

std::vector<std::string> parse_strategy_list(const std::string& text) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    std::string name = text.substr(start, comma == std::string::npos ? comma : comma - start);
    if (name.empty()) {
      throw UsageError("--strategies '" + text + "' has an empty entry (use e.g. ddp,zero1,zero3)");
    }
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      throw UsageError("strategy '" + name + "' is listed twice in --strategies");
    }
    names.push_back(std::move(name));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return names;
}

StrategyEntry parse_strategy_entry(const std::string& entry) {
  StrategyEntry e;
  size_t start = 0;
  size_t colon = entry.find(':');
  e.name = entry.substr(0, colon);
  while (colon != std::string::npos) {
    start = colon + 1;
    colon = entry.find(':', start);
    const std::string option =
        entry.substr(start, colon == std::string::npos ? colon : colon - start);
    const size_t eq = option.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == option.size()) {
      throw UsageError(
          fmt::format("--strategies entry '{}' has an option '{}' that is not KEY=VALUE (use e.g. "
                      "pipeline:schedule=gpipe)",
                      entry, option));
    }
    e.options.emplace_back(option.substr(0, eq), option.substr(eq + 1));
  }
  return e;
}

std::vector<std::string> child_overrides(
    const std::string& strategy, const std::string& config_strategy, int64_t steps,
    int64_t warmup_steps, const std::string& metrics_file,
    const std::vector<std::pair<std::string, std::string>>& options) {
  std::vector<std::string> o{"strategy.name=" + toml_string(strategy)};
  if (strategy != config_strategy) o.emplace_back("strategy.options={}");
  o.push_back("run.steps=" + std::to_string(steps));
  o.emplace_back("run.log_every=1");
  o.push_back("run.metrics=" + toml_string(metrics_file));
  o.emplace_back("checkpoint.dir=\"\"");
  o.emplace_back("checkpoint.resume=false");
  if (warmup_steps > steps) o.push_back("optimizer.warmup_steps=" + std::to_string(steps));
  for (const auto& [key, value] : options) {
    o.push_back("strategy.options." + key + "=" + toml_value(value));
  }
  return o;
}

int run_bench_strategies_command(const GlobalOptions& global, const BenchStrategiesArgs& args,
                                 std::ostream& out) {
  const std::vector<std::string> names = parse_strategy_list(args.strategies);
  std::vector<StrategyEntry> entries;
  std::vector<std::string> plugins;
  for (const auto& name : names) {
    entries.push_back(parse_strategy_entry(name));
    plugins.push_back(entries.back().name);
  }
  if (args.steps < 1)
    throw UsageError("--steps must be at least 1, got " + std::to_string(args.steps));
  refuse_global_config(global, "tessera bench strategies");
  const Config base = load_config(args.config, args.overrides);
  const Session session = open_session(global, base);
  check_names(plugins, *session.registry);
  check_thread_backend(base, *session.registry);

  const ScratchDir scratch;
  std::vector<Planned> planned;
  for (size_t i = 0; i < names.size(); ++i) {
    Planned p{names[i], "run" + std::to_string(i), args.overrides, {}, {}};
    const auto extra = child_overrides(
        entries[i].name, base.strategy.name, args.steps, base.optimizer.warmup_steps,
        (scratch.path() / (p.stem + ".metrics.jsonl")).string(), entries[i].options);
    p.overrides.insert(p.overrides.end(), extra.begin(), extra.end());
    try {
      p.plan = train::plan_run(load_config(args.config, p.overrides), *session.registry);
    } catch (const Error& e) {
      p.refused = e.what();
    }
    planned.push_back(std::move(p));
  }

  const auto first_ok = std::find_if(planned.begin(), planned.end(),
                                     [](const Planned& p) { return p.refused.empty(); });
  StrategiesHeader header;
  header.model = base.model.name;
  header.world_size = base.run.world_size;
  header.backend = base.backend.name;
  header.global_batch = base.data.batch_size;
  if (first_ok != planned.end()) header.parameters = first_ok->plan.parameters;
  header.steps = args.steps;
  header.config_strategy = base.strategy.name;
  header.config_has_options = !base.strategy.options.empty();
  for (const Planned& p : planned) header.label_width = std::max(header.label_width, p.name.size());
  if (base.optimizer.warmup_steps > args.steps) {
    header.notes.push_back(fmt::format("optimizer.warmup_steps {} cut to the {} steps run",
                                       base.optimizer.warmup_steps, args.steps));
  }
  header.launcher_rss_kib = self_max_rss_kib();
  header.csv_path = args.csv;
  StrategiesReporter reporter(header, out);
  reporter.begin();

  const std::string exe = self_executable();
  std::vector<std::string> failed;
  for (const Planned& p : planned) {
    StrategyRow row{p.name, false, {}, 0};
    if (p.refused.empty()) {
      row = run_one(p, global, exe, args.config, scratch.path(),
                    scratch.path() / (p.stem + ".metrics.jsonl"));
    } else {
      std::cerr << "tessera: bench strategies: '" << p.name << "' cannot run: " << p.refused
                << '\n';
    }
    if (!row.ok) failed.push_back(p.name);
    reporter.row(row);
  }
  if (failed.empty()) return kExitOk;
  std::cerr << "tessera: error: " << failed.size() << " of " << names.size()
            << " strategies failed: " << join(failed) << '\n';
  return kExitFailure;
}

}  // namespace tessera::cli

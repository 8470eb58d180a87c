#include "train_command.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "cli_error.hpp"
#include "display_path.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/options.hpp"

namespace tessera::cli {
CLI::App* add_train_command(CLI::App& app, TrainArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "train", "Train the model a run configuration (TOML) describes, on its backend and strategy");
  cmd->add_option("CONFIG", args.config, "Run configuration (TOML); see docs/config.md")
      ->type_name("FILE")
      ->required();
  add_set_option(cmd, args.overrides,
                 "Override one key of the configuration, e.g. --set run.steps=500 (repeatable)");
  cmd->add_flag("--dry-run", args.dry_run,
                "Check the run and print the resolved configuration and the plugin file serving "
                "each role; start no rank");
  return cmd;
}

void print_dry_run(const Config& config, const train::RunPlan& plan, std::ostream& out) {
  // The plugins' option tables as the plugins see them: every declared
  // option, the default where the config gives none.
  Config resolved = config;
  resolved.backend.options = options_table(plan.backend_options);
  resolved.strategy.options = options_table(plan.strategy_options);
  if (resolved.compression && !plan.compressor.empty()) {
    resolved.compression->options = options_table(plan.compressor_options);
  }
  out << "# tessera train --dry-run: the resolved configuration"
      << (config.file.empty() ? std::string() : " of " + config.file.string())
      << " (plugin options with their declared defaults)\n"
      << to_toml(resolved) << "\n# plugins serving each role\n"
      << fmt::format("#   {:<10} {:<10} {}\n", "backend", plan.backend,
                     display_path(plan.backend_file))
      << fmt::format("#   {:<10} {:<10} {}\n", "strategy", plan.strategy,
                     display_path(plan.strategy_file))
      << fmt::format("#   {:<10} {:<10} {}\n", "model", plan.model, display_path(plan.model_file))
      << (plan.compressor.empty()
              ? std::string()
              : fmt::format("#   {:<10} {:<10} {}\n", "compressor", plan.compressor,
                            display_path(plan.compressor_file)))
      << "# plan\n"
      << fmt::format("#   {:<16} {} ({})\n", "ranks", plan.world_size,
                     plan.thread_ranks ? "threads of this process"
                                       : "processes started by the backend's launcher")
      << fmt::format("#   {:<16} {}\n", "parameters", plan.parameters)
      << fmt::format("#   {:<16} {}\n", "data", plan.data)
      << fmt::format("#   {:<16} {} examples per step, {} micro-batch(es) per data-parallel rank\n",
                     "batch", plan.global_batch, plan.micro_batches);
  if (!plan.resume_file.empty()) {
    out << fmt::format("#   {:<16} resume {} (step {})\n", "initial state",
                       plan.resume_file.string(), plan.resume_step);
  } else if (!plan.init_file.empty()) {
    out << fmt::format("#   {:<16} {}\n", "initial state", plan.init_file.string());
  } else {
    out << fmt::format("#   {:<16} the model's init, seed {}\n", "initial state", config.run.seed);
  }
}

namespace {

// TESSERA_JOIN: "1" joins a running world (train::RunOptions::joining);
// unset, empty or "0" does not.
bool join_requested() {
  const char* value = std::getenv("TESSERA_JOIN");  // NOLINT(concurrency-mt-unsafe): start-up
  const std::string text = value != nullptr ? value : "";
  if (text.empty() || text == "0") return false;
  if (text == "1") return true;
  throw UsageError(
      fmt::format("TESSERA_JOIN = '{}': must be 1 (join the running world) or 0", text));
}

}  // namespace

int run_train_command(const GlobalOptions& global, const TrainArgs& args, std::ostream& out) {
  refuse_global_config(global, "tessera train");
  const Config config = load_config(args.config, args.overrides);
  const Session session = open_session(global, config);
  if (args.dry_run) {
    print_dry_run(config, train::plan_run(config, *session.registry), out);
    return kExitOk;
  }
  train::RunOptions options;
  options.joining = join_requested();
  options.out = &out;
  options.progress = isatty(fileno(stderr)) != 0;
  with_memory_hint(
      "lower the model's size, data.batch_size or run.world_size, or raise data.micro_batches",
      [&] { (void)train::run_training(config, *session.registry, options); });
  return kExitOk;
}

}  // namespace tessera::cli

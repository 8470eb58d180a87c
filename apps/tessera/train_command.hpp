// `tessera train CONFIG [--set section.key=value ...] [--dry-run]`: trains
// the model a run configuration describes, with the backend and strategy it
// names.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "cli11.hpp"

#include "global_options.hpp"
#include "tessera/core/train/trainer.hpp"

namespace tessera::cli {

struct TrainArgs {
  std::string config;                  // the TOML file
  std::vector<std::string> overrides;  // --set, in the order given
  bool dry_run = false;
};

// Registers the `train` subcommand on `app`, storing its arguments in `args`.
CLI::App* add_train_command(CLI::App& app, TrainArgs& args);

// The --dry-run report: the resolved configuration as TOML, then, as TOML
// comments, the plugin file serving each role and the plan (world size,
// parameters, data, batch, initial weights).
void print_dry_run(const Config& config, const train::RunPlan& plan, std::ostream& out);

// Loads the config with its overrides, scans plugins (--plugin-path, the
// config's [plugins] paths and allow list, TESSERA_PLUGIN_PATH, the
// built-in directory), checks the run (plan_run) and then either prints the
// dry-run report or trains, writing log lines and the summary to `out` (a
// progress bar on stderr when it is a terminal). Returns kExitOk. Throws
// UsageError when --config is given as well (the config is the argument),
// tessera::Error for a bad config or a failed run.
int run_train_command(const GlobalOptions& global, const TrainArgs& args, std::ostream& out);

}  // namespace tessera::cli

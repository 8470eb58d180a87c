// `tessera bench strategies CONFIG --strategies ddp,zero1,...`: runs the same
// configuration (model, data, batch, backend, world size) under each
// strategy, each in a child process of its own (`tessera train` re-run with
// overrides), and prints step time, bytes sent per step and peak memory per
// rank by category, and each process's peak resident memory.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cli11.hpp"

#include "global_options.hpp"

namespace tessera::cli {

// Flags as given on the command line.
struct BenchStrategiesArgs {
  std::string config;                  // the TOML file
  std::string strategies;              // comma-separated NAME[:KEY=VALUE...] entries
  std::vector<std::string> overrides;  // --set, in the order given
  int64_t steps = 10;                  // steps per strategy
  std::string csv;                     // empty: no CSV
};

// Registers `strategies` under the `bench` subcommand; returns it.
CLI::App* add_bench_strategies_command(CLI::App& bench, BenchStrategiesArgs& args);

// The entries of a --strategies list, in order. Throws UsageError for an
// empty list or entry, or an entry given twice.
std::vector<std::string> parse_strategy_list(const std::string& text);

// One --strategies entry, `NAME[:KEY=VALUE[:KEY=VALUE...]]`: the plugin and
// the [strategy.options] its run sets (e.g. pipeline:schedule=gpipe).
struct StrategyEntry {
  std::string name;
  std::vector<std::pair<std::string, std::string>> options;  // in the order given
};

// Splits an entry. Throws UsageError for an option without KEY=VALUE.
StrategyEntry parse_strategy_entry(const std::string& entry);

// The `--set` overrides the child for `strategy` runs with after the user's
// own: the strategy, its options dropped unless it is the config's own
// strategy, `steps` steps logged at every step into `metrics_file`, no
// checkpoints or resume, a learning-rate warm-up cut to `steps` when
// `warmup_steps` is longer, and last the entry's `options` as
// strategy.options.KEY=VALUE (a value that is not a TOML number, boolean,
// array or string is quoted as a string).
std::vector<std::string> child_overrides(
    const std::string& strategy, const std::string& config_strategy, int64_t steps,
    int64_t warmup_steps, const std::string& metrics_file,
    const std::vector<std::pair<std::string, std::string>>& options = {});

// Validates the command line (usage errors: a bad list, --steps < 1,
// --config given, a strategy name no plugin has, a backend whose ranks are
// not threads), checks each strategy's run (plan_run; a strategy whose run
// is refused gets a failed row), then runs the strategies one at a time,
// each as `<this executable> train CONFIG --set ...` in its own process,
// streaming one table row per strategy to `out`. A failed child's row says
// "failed" and the tail of its stderr goes to stderr. Returns kExitOk, or
// kExitFailure when any strategy failed (after the whole table). Throws
// tessera::Error for a bad config or an unwritable CSV file.
int run_bench_strategies_command(const GlobalOptions& global, const BenchStrategiesArgs& args,
                                 std::ostream& out);

}  // namespace tessera::cli

// `tessera select CONFIG [--world N] [--ranks-per-node K] [--memory-per-rank
// SIZE] [--selector NAME] [--json]`: runs the strategy selector on the
// configuration's model and batch without training, and prints its ranking
// (docs/strategies/auto.md).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "cli11.hpp"

#include "global_options.hpp"
#include "tessera/core/train/selection.hpp"

namespace tessera::cli {

struct SelectArgs {
  std::string config;
  std::vector<std::string> overrides;  // --set, in the order given
  int world = 0;                       // --world; run.world_size when not given
  bool world_given = false;            // --world was on the command line
  int ranks_per_node = 0;              // --ranks-per-node; every rank on one node when not given
  bool ranks_per_node_given = false;   // --ranks-per-node was on the command line
  std::string memory_per_rank;         // empty: run.memory_per_rank, else detected
  std::string selector;                // empty: the configuration's (or "auto")
  bool json = false;
};

CLI::App* add_select_command(CLI::App& app, SelectArgs& args);

// The ranking as a table: one row per candidate (the choice marked with
// '*'), memory per rank by category, bytes sent per step, predicted (and
// measured) step time, whether it fits, and the reason.
void print_selection_table(const train::Selection& selection, std::ostream& out);
// The ranking as one JSON object.
void print_selection_json(const train::Selection& selection, std::ostream& out);

// Returns kExitOk; throws UsageError for a bad flag, tessera::Error for a
// bad config or a selector that chooses nothing (e.g. no candidate fits).
int run_select_command(const GlobalOptions& global, const SelectArgs& args, std::ostream& out);

}  // namespace tessera::cli

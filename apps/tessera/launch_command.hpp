// `tessera launch -n N [--nnodes M --node-rank K --master-addr A
// --master-port P] [--run-id ID] [--grace S] [--tolerate-failures N]
// [--no-prefix] -- COMMAND [ARGS...]`: starts N local processes of COMMAND, one rank each, with the
// torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, ...) that the
// process backends read, and watches them until they have all ended.
// With `--nnodes MIN:MAX` or `--max-restarts K` the launch is elastic (see
// launch_elastic.hpp): node ranks come from a rendezvous of the launchers,
// and a failed rank restarts the command on every node that is left.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "cli11.hpp"

#include "launch_env.hpp"

namespace tessera::cli {

struct LaunchArgs {
  int nproc_per_node = 0;            // -n / --nproc-per-node (required)
  std::string nnodes = "1";          // --nnodes: N, or MIN:MAX for an elastic launch
  int node_rank = 0;                 // --node-rank
  bool node_rank_given = false;      // --node-rank was on the command line
  int max_restarts = 0;              // --max-restarts
  double rdzv_timeout_s = 300.0;     // --rdzv-timeout
  double rdzv_last_call_s = 10.0;    // --rdzv-last-call
  std::string master_addr;           // --master-addr; empty: 127.0.0.1 on one node
  int master_port = 0;               // --master-port
  bool master_port_given = false;    // --master-port was on the command line
  std::string run_id;                // --run-id; empty: chosen
  double grace_s = 30.0;             // --grace
  int tolerate_failures = 0;         // --tolerate-failures
  bool no_prefix = false;            // --no-prefix
  std::vector<std::string> command;  // everything after "--"
};

// Registers the `launch` subcommand on `app`, storing its arguments in
// `args`. Everything after "--" is the command, even words that look like
// options or subcommands.
CLI::App* add_launch_command(CLI::App& app, LaunchArgs& args);

// Checks the arguments and fills in the chosen values, without starting
// anything: MASTER_ADDR defaults to 127.0.0.1; on one node MASTER_PORT to a
// free port of it and TESSERA_RUN_ID to a random id; on several nodes the run
// id defaults to "<master-addr>:<master-port>". `argv` is the whole command
// line as main() received it, used to check that the command follows "--".
// Throws UsageError naming the flag and value (command missing or not after
// "--", -n < 1, --nnodes < 1, --node-rank outside [0, nnodes), port outside
// 1..65535, --master-addr/--master-port missing with several nodes, negative
// --grace or --tolerate-failures) and tessera::Error when no free port can be found.
LaunchTopology plan_launch(const LaunchArgs& args, std::span<char* const> argv);

// Whether the arguments ask for an elastic launch (--nnodes MIN:MAX with
// MIN < MAX, or --max-restarts > 0). Throws UsageError for a bad --nnodes.
bool is_elastic(const LaunchArgs& args);

// Runs the subcommand: plans the launch, creates the rendezvous directory on
// one node (unless TESSERA_RENDEZVOUS_DIR is already set, which is then
// passed on and left alone), starts every rank and supervises them (see
// RankSupervisor::supervise). Returns 0 when every rank exited with status 0,
// else 1. Throws UsageError for a bad command line and tessera::Error when a
// rank cannot be started (after stopping the ranks already started).
int run_launch_command(const LaunchArgs& args, std::span<char* const> argv);

}  // namespace tessera::cli

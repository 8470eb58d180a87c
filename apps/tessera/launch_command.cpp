#include "launch_command.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "cli_error.hpp"
#include "launch_process.hpp"
#include "launch_signals.hpp"
#include "launch_supervisor.hpp"

namespace tessera::cli {
namespace {

constexpr const char* kDefaultMasterAddr = "127.0.0.1";
constexpr const char* kExample = "e.g. tessera launch -n 2 -- python train.py";

// True when `argv` ends with "--" followed by exactly `command`.
bool command_follows_separator(const std::vector<std::string>& command,
                               std::span<char* const> argv) {
  if (argv.size() < command.size() + 1) return false;
  const std::size_t first = argv.size() - command.size();
  if (argv[first - 1] == nullptr || std::strcmp(argv[first - 1], "--") != 0) return false;
  for (std::size_t i = 0; i < command.size(); ++i) {
    if (argv[first + i] == nullptr || command[i] != argv[first + i]) return false;
  }
  return true;
}

void check_arguments(const LaunchArgs& args, std::span<char* const> argv) {
  if (args.command.empty()) {
    throw UsageError(fmt::format("missing COMMAND after '--' ({})", kExample));
  }
  if (!command_follows_separator(args.command, argv)) {
    throw UsageError(
        fmt::format("missing '--' before the command '{}' ({})", args.command.front(), kExample));
  }
  if (args.nproc_per_node < 1) {
    throw UsageError(
        fmt::format("-n/--nproc-per-node must be at least 1, got {}", args.nproc_per_node));
  }
  if (args.nnodes < 1) {
    throw UsageError(fmt::format("--nnodes must be at least 1, got {}", args.nnodes));
  }
  if (args.node_rank < 0 || args.node_rank >= args.nnodes) {
    throw UsageError(fmt::format("--node-rank {} is outside [0, {}) (--nnodes {})", args.node_rank,
                                 args.nnodes, args.nnodes));
  }
  if (args.master_port != 0 && (args.master_port < 1 || args.master_port > 65535)) {
    throw UsageError(
        fmt::format("--master-port must be a TCP port in 1..65535, got {}", args.master_port));
  }
  if (args.nnodes > 1 && args.master_addr.empty()) {
    throw UsageError(fmt::format(
        "--master-addr is required with --nnodes {} (every node must name the same master)",
        args.nnodes));
  }
  if (args.nnodes > 1 && args.master_port == 0) {
    throw UsageError(fmt::format(
        "--master-port is required with --nnodes {} (every node must name the same port)",
        args.nnodes));
  }
  if (!(args.grace_s >= 0.0)) {
    throw UsageError(fmt::format("--grace must be zero or more seconds, got {}", args.grace_s));
  }
}

}  // namespace

CLI::App* add_launch_command(CLI::App& app, LaunchArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Start N processes of COMMAND on this node, one rank each, with RANK, WORLD_SIZE, "
      "LOCAL_RANK, MASTER_ADDR, MASTER_PORT, ... set (torchrun's conventions)");
  cmd->add_option("-n,--nproc-per-node", args.nproc_per_node, "Ranks to start on this node")
      ->type_name("N")
      ->required();
  cmd->add_option("--nnodes", args.nnodes,
                  "Nodes taking part, each running its own `tessera launch` (default 1)")
      ->type_name("M");
  cmd->add_option("--node-rank", args.node_rank,
                  "Index of this node in [0, nnodes); its ranks are K*N .. K*N+N-1 (default 0)")
      ->type_name("K");
  cmd->add_option("--master-addr", args.master_addr,
                  "MASTER_ADDR for every rank (default 127.0.0.1; required with --nnodes > 1)")
      ->type_name("ADDR");
  cmd->add_option("--master-port", args.master_port,
                  "MASTER_PORT for every rank (default on one node: a free port; required with "
                  "--nnodes > 1)")
      ->type_name("PORT");
  cmd->add_option("--run-id", args.run_id,
                  "TESSERA_RUN_ID, the namespace of this run's rendezvous keys (default: random "
                  "on one node, MASTER_ADDR:MASTER_PORT on several)")
      ->type_name("ID");
  cmd->add_option("--grace", args.grace_s,
                  "Seconds the other ranks may keep running after one fails, before SIGTERM "
                  "(default 30; SIGKILL follows 5 s after SIGTERM)")
      ->type_name("S");
  cmd->add_flag("--no-prefix", args.no_prefix,
                "Let ranks write straight to this terminal instead of prefixing each line with "
                "[rank R]");
  cmd->add_option("COMMAND", args.command,
                  "After '--': the program each rank runs (looked up on PATH) and its arguments")
      ->type_name("");
  return cmd;
}

LaunchTopology plan_launch(const LaunchArgs& args, std::span<char* const> argv) {
  check_arguments(args, argv);
  LaunchTopology topology;
  topology.nproc_per_node = args.nproc_per_node;
  topology.nnodes = args.nnodes;
  topology.node_rank = args.node_rank;
  topology.master_addr = args.master_addr.empty() ? kDefaultMasterAddr : args.master_addr;
  topology.master_port =
      args.master_port != 0 ? args.master_port : find_free_port(topology.master_addr);
  if (!args.run_id.empty()) {
    topology.run_id = args.run_id;
  } else if (args.nnodes > 1) {
    topology.run_id = fmt::format("{}:{}", topology.master_addr, topology.master_port);
  } else {
    topology.run_id = random_run_id();
  }
  return topology;
}

int run_launch_command(const LaunchArgs& args, std::span<char* const> argv) {
  LaunchTopology topology = plan_launch(args, argv);
  std::optional<RendezvousDir> rendezvous;
  const char* existing = std::getenv("TESSERA_RENDEZVOUS_DIR");  // NOLINT(concurrency-mt-unsafe)
  if (existing != nullptr && *existing != '\0') {
    topology.rendezvous_dir = existing;
  } else if (topology.nnodes == 1) {
    rendezvous.emplace();
    topology.rendezvous_dir = rendezvous->path().string();
  }

  // Declared after the directory, so the ranks are gone before it is removed.
  SignalPipe signals;
  RankSupervisor supervisor;
  const std::vector<std::string> base = current_environment();
  for (int local = 0; local < topology.nproc_per_node; ++local) {
    SpawnRequest request;
    request.rank = topology.node_rank * topology.nproc_per_node + local;
    request.command = args.command;
    request.environment = merge_environment(base, rank_variables(topology, local));
    request.capture_output = !args.no_prefix;
    supervisor.add(request.rank, spawn_rank(request), !args.no_prefix);
  }

  SuperviseOptions options;
  const double grace_ms = std::min(args.grace_s, 1e9) * 1000.0;
  options.grace = std::chrono::milliseconds(std::llround(grace_ms));
  return supervisor.supervise(signals, options);
}

}  // namespace tessera::cli

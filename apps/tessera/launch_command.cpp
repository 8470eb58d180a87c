#include "launch_command.hpp"

#include <unistd.h>
#include <algorithm>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli_error.hpp"
#include "launch_elastic.hpp"
#include "launch_output.hpp"
#include "launch_process.hpp"
#include "launch_signals.hpp"
#include "launch_supervisor.hpp"
#include "tessera/core/tcp_store.hpp"

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
  const auto [min_nodes, max_nodes] = parse_nnodes(args.nnodes);
  if (args.max_restarts < 0) {
    throw UsageError(fmt::format("--max-restarts must be zero or more, got {}", args.max_restarts));
  }
  const bool elastic = is_elastic(args);
  if (elastic && args.node_rank_given) {
    throw UsageError(fmt::format(
        "--node-rank cannot be given to an elastic launch (--nnodes {}, --max-restarts {}): the "
        "launchers' rendezvous numbers the nodes",
        args.nnodes, args.max_restarts));
  }
  if (!elastic && (args.node_rank < 0 || args.node_rank >= min_nodes)) {
    throw UsageError(fmt::format("--node-rank {} is outside [0, {}) (--nnodes {})", args.node_rank,
                                 min_nodes, min_nodes));
  }
  for (const auto& [flag, value] : {std::pair{"--rdzv-timeout", args.rdzv_timeout_s},
                                    std::pair{"--rdzv-last-call", args.rdzv_last_call_s}}) {
    if (!(value >= 0.0) || value > 1e9) {
      throw UsageError(fmt::format("{} must be zero or more seconds, got {}", flag, value));
    }
  }
  if (args.master_port_given && (args.master_port < 1 || args.master_port > 65535)) {
    throw UsageError(
        fmt::format("--master-port must be a TCP port in 1..65535, got {}", args.master_port));
  }
  if (max_nodes > 1 && args.master_addr.empty()) {
    throw UsageError(fmt::format(
        "--master-addr is required with --nnodes {} (every node must name the same master)",
        args.nnodes));
  }
  if (max_nodes > 1 && !args.master_port_given) {
    throw UsageError(fmt::format(
        "--master-port is required with --nnodes {} (every node must name the same port)",
        args.nnodes));
  }
  if (args.tolerate_failures > 0 && max_nodes > 1 && args.master_port == 65535) {
    throw UsageError(
        "--master-port must be below 65535 with --tolerate-failures on several nodes (the "
        "launcher of node 0 serves the ranks' TCP store on the next port)");
  }
  if (!(args.grace_s >= 0.0)) {
    throw UsageError(fmt::format("--grace must be zero or more seconds, got {}", args.grace_s));
  }
  if (args.tolerate_failures < 0) {
    throw UsageError(
        fmt::format("--tolerate-failures must be zero or more, got {}", args.tolerate_failures));
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
                  "Nodes taking part, each running its own `tessera launch` (default 1); "
                  "MIN:MAX: an elastic launch that runs with any count in that range")
      ->type_name("M|MIN:MAX");
  cmd->add_option("--node-rank", args.node_rank,
                  "Index of this node in [0, nnodes); its ranks are K*N .. K*N+N-1 (default 0; "
                  "not with an elastic launch, where the rendezvous numbers the nodes)")
      ->type_name("K")
      ->each([&args](const std::string&) { args.node_rank_given = true; });
  cmd->add_option("--max-restarts", args.max_restarts,
                  "Elastic: times the command is started again on the nodes left after a rank "
                  "fails (default 0)")
      ->type_name("K");
  cmd->add_option("--rdzv-timeout", args.rdzv_timeout_s,
                  "Elastic: seconds a round of the rendezvous waits for MIN nodes (default 300)")
      ->type_name("S");
  cmd->add_option("--rdzv-last-call", args.rdzv_last_call_s,
                  "Elastic: seconds a round stays open for more nodes once MIN have joined "
                  "(default 10; it closes at once with MAX)")
      ->type_name("S");
  cmd->add_option("--master-addr", args.master_addr,
                  "MASTER_ADDR for every rank (default 127.0.0.1; required with --nnodes > 1)")
      ->type_name("ADDR");
  cmd->add_option("--master-port", args.master_port,
                  "MASTER_PORT for every rank (default on one node: a free port; required with "
                  "--nnodes > 1)")
      ->type_name("PORT")
      ->each([&args](const std::string&) { args.master_port_given = true; });
  cmd->add_option("--run-id", args.run_id,
                  "TESSERA_RUN_ID, the namespace of this run's rendezvous keys (default: random "
                  "on one node, MASTER_ADDR:MASTER_PORT on several)")
      ->type_name("ID");
  cmd->add_option("--grace", args.grace_s,
                  "Seconds the other ranks may keep running after one fails, before SIGTERM "
                  "(default 30; SIGKILL follows 5 s after SIGTERM)")
      ->type_name("S");
  cmd->add_option("--tolerate-failures", args.tolerate_failures,
                  "Rank failures (non-zero exit or killed) the other ranks go on after; the next "
                  "one stops the job as with --grace (default 0; elastic: counted per round)")
      ->type_name("N");
  cmd->add_flag("--no-prefix", args.no_prefix,
                "Let ranks write straight to this terminal instead of prefixing each line with "
                "[rank R]");
  cmd->add_option("COMMAND", args.command,
                  "After '--': the program each rank runs (looked up on PATH) and its arguments")
      ->type_name("");
  return cmd;
}

bool is_elastic(const LaunchArgs& args) {
  const auto [min_nodes, max_nodes] = parse_nnodes(args.nnodes);
  return min_nodes != max_nodes || args.max_restarts > 0;
}

LaunchTopology plan_launch(const LaunchArgs& args, std::span<char* const> argv) {
  check_arguments(args, argv);
  const int max_nodes = parse_nnodes(args.nnodes).second;
  LaunchTopology topology;
  topology.nproc_per_node = args.nproc_per_node;
  topology.nnodes = max_nodes;
  topology.node_rank = args.node_rank;
  topology.master_addr = args.master_addr.empty() ? kDefaultMasterAddr : args.master_addr;
  topology.master_port =
      args.master_port_given ? args.master_port : find_free_port(topology.master_addr);
  if (!args.run_id.empty()) {
    topology.run_id = args.run_id;
  } else if (max_nodes > 1 || is_elastic(args)) {
    topology.run_id = fmt::format("{}:{}", topology.master_addr, topology.master_port);
  } else {
    topology.run_id = random_run_id();
  }
  return topology;
}

namespace {

std::chrono::milliseconds milliseconds_of(double seconds) {
  return std::chrono::milliseconds(std::llround(std::min(seconds, 1e9) * 1000.0));
}

// Starts this node's ranks of `topology` under `supervisor`, each with the
// rank variables and `extra` on top of this process's environment.
void start_ranks(RankSupervisor& supervisor, const LaunchArgs& args, const LaunchTopology& topology,
                 const std::vector<std::pair<std::string, std::string>>& extra = {}) {
  const std::vector<std::string> base = current_environment();
  for (int local = 0; local < topology.nproc_per_node; ++local) {
    auto variables = rank_variables(topology, local);
    variables.insert(variables.end(), extra.begin(), extra.end());
    SpawnRequest request;
    request.rank = topology.node_rank * topology.nproc_per_node + local;
    request.command = args.command;
    request.environment = merge_environment(base, variables);
    request.capture_output = !args.no_prefix;
    supervisor.add(request.rank, spawn_rank(request), !args.no_prefix);
  }
}

void launcher_message(const std::string& text) {
  (void)write_all(STDERR_FILENO, "tessera launch: " + text + "\n");
}

// The elastic launch: rounds of the rendezvous, each starting and watching
// this node's ranks, until one round succeeds here, the restarts run out,
// or the launcher is interrupted.
int run_elastic(const LaunchArgs& args, const LaunchTopology& planned, SignalPipe& signals,
                const SuperviseOptions& base) {
  ElasticSettings settings;
  std::tie(settings.min_nodes, settings.max_nodes) = parse_nnodes(args.nnodes);
  settings.max_restarts = args.max_restarts;
  settings.nproc_per_node = args.nproc_per_node;
  settings.master_addr = planned.master_addr;
  settings.master_port = planned.master_port;
  settings.run_id = planned.run_id;
  settings.join_timeout = milliseconds_of(args.rdzv_timeout_s);
  settings.last_call = milliseconds_of(args.rdzv_last_call_s);
  ElasticRendezvous rendezvous(settings, launcher_message);

  bool interrupted = false;
  const auto stop_waiting = [&] {
    for (const int sig : signals.take()) interrupted |= sig == SIGINT || sig == SIGTERM;
    return interrupted;
  };
  bool failed_here = false;
  for (;;) {
    const std::optional<RoundAssignment> round = rendezvous.join(stop_waiting);
    if (!round) {
      if (interrupted) {
        launcher_message("elastic: interrupted while waiting for a round; exiting");
        return 1;
      }
      launcher_message(failed_here ? "elastic: the run finished on the other nodes after this "
                                     "node's ranks failed"
                                   : "elastic: the run finished before this node took part");
      return failed_here ? 1 : 0;
    }
    const LaunchTopology& t = round->topology;
    const int first = t.node_rank * t.nproc_per_node;
    launcher_message(fmt::format(
        "elastic: round {}: {} node{} (--nnodes {}), this is node {}: world size {}, ranks {}..{}, "
        "MASTER_ADDR:MASTER_PORT {}:{}; {} of {} restarts left",
        round->round, round->nodes, round->nodes == 1 ? "" : "s", args.nnodes, round->node,
        t.nnodes * t.nproc_per_node, first, first + t.nproc_per_node - 1, t.master_addr,
        t.master_port, settings.max_restarts - round->round, settings.max_restarts));
    if (!round->left.empty()) {
      launcher_message(fmt::format("elastic: gone since round {}: {}", round->round - 1,
                                   fmt::join(round->left, ", ")));
    }
    if (!round->joined.empty()) {
      launcher_message(fmt::format("elastic: new since round {}: {}", round->round - 1,
                                   fmt::join(round->joined, ", ")));
    }

    RankSupervisor supervisor;
    start_ranks(supervisor, args, t,
                {{"TESSERA_RESTART_COUNT", std::to_string(round->round)},
                 {"TESSERA_MAX_RESTARTS", std::to_string(settings.max_restarts)}});
    SuperviseOptions options = base;
    options.on_failure = [&](const std::string& what) {
      rendezvous.report_failure(round->round, fmt::format("node {}: {}", round->node, what));
    };
    options.stop_requested = [&]() -> std::optional<std::string> {
      const std::optional<std::string> failure = rendezvous.failure(round->round);
      if (!failure) return std::nullopt;
      return fmt::format("elastic: round {} failed ({})", round->round, *failure);
    };
    if (supervisor.supervise(signals, options) == 0) {
      rendezvous.finished(round->round, round->node);
      launcher_message(fmt::format("elastic: round {} finished on this node", round->round));
      return 0;
    }
    failed_here = true;
    // Ranks stopped by the launcher alone report nothing through on_failure.
    rendezvous.report_failure(round->round, fmt::format("node {}: its ranks failed", round->node));
    const std::string why = rendezvous.failure(round->round).value_or("unknown");
    if (supervisor.interrupted()) {
      launcher_message(
          fmt::format("elastic: interrupted in round {}; not restarting", round->round));
      return 1;
    }
    if (round->round >= settings.max_restarts) {
      launcher_message(
          fmt::format("elastic: round {} failed ({}); no restarts left (--max-restarts "
                      "{})",
                      round->round, why, settings.max_restarts));
      return 1;
    }
    launcher_message(
        fmt::format("elastic: round {} failed ({}); restarting on the nodes left "
                    "(restart {} of {})",
                    round->round, why, round->round + 1, settings.max_restarts));
    rendezvous.advance(round->round);
  }
}

}  // namespace

int run_launch_command(const LaunchArgs& args, std::span<char* const> argv) {
  LaunchTopology topology = plan_launch(args, argv);
  SuperviseOptions options;
  options.grace = milliseconds_of(args.grace_s);
  options.tolerate_failures = args.tolerate_failures;
  if (is_elastic(args)) {
    SignalPipe signals;
    return run_elastic(args, topology, signals, options);
  }
  std::optional<RendezvousDir> rendezvous;
  const char* existing = std::getenv("TESSERA_RENDEZVOUS_DIR");  // NOLINT(concurrency-mt-unsafe)
  if (existing != nullptr && *existing != '\0') {
    topology.rendezvous_dir = existing;
  } else if (topology.nnodes == 1) {
    rendezvous.emplace();
    topology.rendezvous_dir = rendezvous->path().string();
  }

  // Ranks that may fail while the others go on (--tolerate-failures, the
  // `elastic` strategy) must not lose the store with whichever rank serves
  // it: the launcher of node 0 serves the ranks' TCP store itself, on a free
  // port on one node or on MASTER_PORT + 1 across nodes, and every rank
  // finds it in TESSERA_STORE_ADDR (MASTER_ADDR and MASTER_PORT stay free
  // for the program).
  std::unique_ptr<store::TcpStoreServer> store;
  std::vector<std::pair<std::string, std::string>> extra;
  if (args.tolerate_failures > 0) {
    int32_t port = topology.nnodes == 1 ? 0 : topology.master_port + 1;
    if (topology.node_rank == 0) {
      store = std::make_unique<store::TcpStoreServer>(topology.master_addr, port);
      port = store->port();
      launcher_message(fmt::format(
          "serving the ranks' TCP store on {}:{} (TESSERA_STORE_ADDR), so that it outlives "
          "any rank (--tolerate-failures)",
          topology.master_addr, port));
    }
    extra.emplace_back("TESSERA_STORE_ADDR", fmt::format("{}:{}", topology.master_addr, port));
  }

  // Declared after the directory and the store, so the ranks are gone
  // before either goes.
  SignalPipe signals;
  RankSupervisor supervisor;
  start_ranks(supervisor, args, topology, extra);
  return supervisor.supervise(signals, options);
}

}  // namespace tessera::cli

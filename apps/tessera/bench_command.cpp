#include "bench_command.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <span>
#include <string>

#include <fmt/format.h>

#include "bench_buffer.hpp"
#include "bench_launch.hpp"
#include "bench_report.hpp"
#include "cli_error.hpp"
#include "plugins_command.hpp"
#include "size_list.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/options.hpp"
#include "tessera/core/rank_threads.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {

CLI::App* add_bench_command(CLI::App& app, BenchArgs& args) {
  CLI::App* bench =
      app.add_subcommand("bench",
                         "Benchmarks: `bench collectives` times one collective; `bench strategies` "
                         "compares strategies on one configuration");
  bench->require_subcommand(1);
  CLI::App* cmd = bench->add_subcommand(
      "collectives", "Time one collective over a range of sizes and check every result");
  // A flag given twice takes its last value, so a command can be amended by appending.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--backend", args.backend, "Backend plugin name (e.g. inmemory)")
      ->type_name("NAME")
      ->required();
  args.ranks_option =
      cmd->add_option("--ranks", args.ranks,
                      "Number of ranks: threads for a thread-rank backend; for a process backend "
                      "the world size (may be omitted)")
          ->type_name("N");
  cmd->add_option("--op", args.op, "Collective: " + bench_op_list())->type_name("OP")->required();
  cmd->add_option("--sizes", args.sizes, "Sizes in bytes A:B (or A) with K/M/G suffixes, 1K = 1024")
      ->type_name("A:B")
      ->required();
  cmd->add_option("--dtype", args.dtype, "Element type: " + dtype_list())
      ->type_name("TYPE")
      ->capture_default_str();
  cmd->add_option("--redop", args.redop, "Reduction for reducing ops: " + redop_list())
      ->type_name("OP")
      ->capture_default_str();
  cmd->add_option("--iters", args.iters, "Timed iterations per size")->capture_default_str();
  cmd->add_option("--warmup", args.warmup, "Untimed iterations per size")->capture_default_str();
  cmd->add_option("--step-factor", args.step_factor, "Multiply the size by this at each step")
      ->capture_default_str();
  cmd->add_option("--csv", args.csv, "Also write the rows as CSV to FILE")->type_name("FILE");
  cmd->add_option("--timeout-s", args.timeout_s, "Per-operation timeout in seconds")
      ->capture_default_str();
  cmd->add_flag("--compare-raw", args.compare_raw,
                "Also time the backend's raw library call (e.g. MPI_Allreduce) on the same "
                "buffers and print raw time, tessera/raw ratio and overhead");
  cmd->add_flag("--check-collectives", args.check_collectives,
                "Run every operation through the host's checked layer, which compares it across "
                "the ranks first (what `tessera train` does with backend.check_collectives)");
  cmd->add_option("--device", args.device,
                  "Where the buffers live: cpu, or cuda (this rank's CUDA device, LOCAL_RANK or "
                  "0; the backend must take CUDA buffers)")
      ->type_name("DEVICE")
      ->capture_default_str();
  cmd->add_option("--option", args.options, "Backend option key=value (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return cmd;
}

BenchRequest validate_bench_args(const BenchArgs& args) {
  BenchRequest req;
  const auto op = parse_bench_op(args.op);
  if (!op) throw UsageError("unknown op '" + args.op + "' for --op (use " + bench_op_list() + ")");
  const auto dtype = parse_dtype(args.dtype);
  if (!dtype) {
    throw UsageError("unknown dtype '" + args.dtype + "' for --dtype (use " + dtype_list() + ")");
  }
  const auto redop = parse_redop(args.redop);
  if (!redop) {
    throw UsageError("unknown reduction '" + args.redop + "' for --redop (use " + redop_list() +
                     ")");
  }
  const auto device = parse_bench_device(args.device);
  if (!device) {
    throw UsageError("unknown device '" + args.device + "' for --device (use " +
                     bench_device_list() + ")");
  }
  const bool ranks_given = args.ranks_option != nullptr && args.ranks_option->count() > 0;
  if (ranks_given && args.ranks < 1) {
    throw UsageError("--ranks must be at least 1, got " + std::to_string(args.ranks));
  }
  if (args.iters < 1)
    throw UsageError("--iters must be at least 1, got " + std::to_string(args.iters));
  if (args.warmup < 0) {
    throw UsageError("--warmup must not be negative, got " + std::to_string(args.warmup));
  }
  if (args.step_factor < 2) {
    throw UsageError("--step-factor must be at least 2, got " + std::to_string(args.step_factor));
  }
  if (!(args.timeout_s > 0.0 && args.timeout_s <= kMaxTimeoutSeconds)) {
    throw UsageError(
        fmt::format("--timeout-s must be a positive number of seconds up to {} (7 days), got {}",
                    kMaxTimeoutSeconds, args.timeout_s));
  }
  req.spec = BenchSpec{
      *op, *dtype, *redop, args.iters, args.warmup, args.compare_raw, tessera_device{*device, 0}};
  req.sizes = expand_sizes(parse_size_range(args.sizes), static_cast<uint64_t>(args.step_factor));
  req.ranks = ranks_given ? args.ranks : -1;
  req.timeout_s = args.timeout_s;
  return req;
}

namespace {

// --option values as a table, checked against the backend's declarations
// here so that a bad key is reported as a usage error.
toml::table backend_options(const LoadedPlugin& plugin, const std::vector<std::string>& options) {
  try {
    toml::table table = parse_option_overrides(options);
    const auto& d = plugin.descriptor();
    const std::span<const tessera_option_decl> decls =
        d.options == nullptr ? std::span<const tessera_option_decl>{}
                             : std::span<const tessera_option_decl>(d.options, d.num_options);
    (void)resolve_options(decls, &table, "--option");
    return table;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

int run_bench_command(const GlobalOptions& global, const BenchArgs& args, std::ostream& out) {
  BenchRequest req = validate_bench_args(args);
  const Session session = open_session(global);
  const auto plugin = session.registry->get(TESSERA_KIND_BACKEND, args.backend);
  const uint32_t capabilities = backend_capabilities(plugin->descriptor());
  const bool threads = (capabilities & TESSERA_BACKEND_CAP_THREAD_RANKS) != 0;
  if (req.spec.device.type == TESSERA_DEVICE_CUDA) {
    if ((capabilities & TESSERA_BACKEND_CAP_CUDA_BUFFERS) == 0) {
      throw UsageError("--device cuda: backend '" + args.backend + "' takes no CUDA buffers");
    }
    req.spec.device =
        bench_cuda_device(std::getenv("LOCAL_RANK"));  // NOLINT(concurrency-mt-unsafe)
  }
  if (threads && req.ranks < 1) {
    throw UsageError("--ranks is required with backend '" + args.backend +
                     "' (its ranks are threads of this process)");
  }
  if (threads) {
    const std::string excess =
        rank_thread_excess(req.ranks, "--ranks " + std::to_string(req.ranks), args.backend);
    if (!excess.empty()) throw UsageError(excess);
  }
  const toml::table options = backend_options(*plugin, args.options);

  BackendSettings settings;
  settings.world_size = threads ? req.ranks : -1;
  settings.timeout = timeout_ms(req.timeout_s, "--timeout-s");
  if (args.check_collectives) settings.checks = CollectiveChecks::verify;
  const auto backend =
      open_backend(*session.registry, args.backend, &options, "--option", settings);

  TextBenchReporter reporter(BenchHeader{args.backend, req.spec, req.timeout_s, args.csv}, out);
  with_memory_hint("try smaller --sizes or fewer --ranks",
                   [&] { launch_bench(*backend, req.ranks, req.spec, req.sizes, reporter); });
  const uint64_t wrong = reporter.total_wrong() + reporter.raw_wrong();
  if (wrong != 0) {
    std::cerr << "tessera: error: " << wrong << " mismatching element(s) in the "
              << coll_name(req.spec.op) << " results of backend '" << args.backend << "'";
    if (reporter.raw_wrong() != 0) {
      std::cerr << " (" << reporter.raw_wrong() << " of them from its raw library call)";
    }
    std::cerr << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace tessera::cli

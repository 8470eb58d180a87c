// `tessera bench collectives`: the nccl-tests style benchmark of one
// collective on one backend over a range of sizes.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "cli11.hpp"

#include "bench_engine.hpp"
#include "global_options.hpp"

namespace tessera::cli {

// Flags as given on the command line (validated by run_bench_command).
struct BenchArgs {
  std::string backend;
  int ranks = 0;
  CLI::Option* ranks_option = nullptr;  // set by add_bench_command; tells if --ranks was given
  std::string op;
  std::string sizes;
  std::string dtype = "f32";
  std::string redop = "sum";
  int iters = 20;
  int warmup = 5;
  int64_t step_factor = 2;
  std::string csv;
  double timeout_s = 60.0;
  std::vector<std::string> options;  // backend options, key=value
  bool compare_raw = false;          // also time the backend's raw library call
  bool check_collectives = false;    // through the checked layer (verify)
  std::string device = "cpu";        // where the buffers live: cpu or cuda
};

// Registers `bench` with its `collectives` subcommand on `app`; returns the
// `collectives` subcommand.
CLI::App* add_bench_command(CLI::App& app, BenchArgs& args);

// The validated form of BenchArgs.
struct BenchRequest {
  BenchSpec spec;
  std::vector<uint64_t> sizes;  // requested sizes before rounding
  int ranks = -1;               // -1: not given
  double timeout_s = 60.0;
};

// Checks every flag and throws UsageError naming the flag and value for an
// unknown op/dtype/redop, ranks < 1, iters < 1, warmup < 0, step factor < 2,
// timeout <= 0, an unknown --device, or an invalid size/range. The device's
// ordinal is left 0 (run_bench_command picks it).
BenchRequest validate_bench_args(const BenchArgs& args);

// Validates the flags, scans plugins, opens the backend with its --option
// values (an unknown or ill-typed key is a UsageError), runs the benchmark
// and prints it to `out`. Returns kExitOk, or kExitFailure when any element
// was wrong, through the plugin or (with --compare-raw) the raw call, after
// printing the table. A backend without a raw call for the op under
// --compare-raw is a UsageError. --device cuda with a backend that takes no
// CUDA buffers, or in a build without the CUDA Toolkit, is a UsageError;
// without a usable device (or LOCAL_RANK beyond the device count) it throws
// tessera::Error before the backend is opened. Backend failures throw.
int run_bench_command(const GlobalOptions& global, const BenchArgs& args, std::ostream& out);

}  // namespace tessera::cli

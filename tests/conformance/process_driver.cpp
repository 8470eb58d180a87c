// The conformance suite for process-based backends: this program is ONE
// rank. Start it once per rank with the backend's launcher, e.g.
//
//   mpirun -np 4 tessera_conformance_rank --backend mpi
//   tessera launch -n 4 -- tessera_conformance_rank --backend gloo
//
// Every rank connects with the rank its environment gives and runs the same
// cases (all of them, or those named with --case) in the same order. Each
// rank prints "rank R: <case> ok" or its failure; on the first failure it
// aborts its world communicator so that the other ranks stop waiting, and
// exits 1. Exit 0 only when every case passed on this rank.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cases.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/options.hpp"
#include "tessera/core/plugin_registry.hpp"

#ifndef TESSERA_CONFORMANCE_PLUGIN_DIR
#error "TESSERA_CONFORMANCE_PLUGIN_DIR must name the build tree's plugin directory"
#endif

namespace tessera::conformance {
namespace {

struct DriverArgs {
  std::string backend;
  std::vector<std::string> options;  // key=value
  std::vector<std::string> cases;    // empty: all
  int64_t timeout_ms = 10000;
};

constexpr std::string_view kUsage =
    "usage: tessera_conformance_rank --backend NAME [--option key=value]... [--case NAME]...\n"
    "                                [--timeout-ms N]\n";

// Parses argv; throws std::invalid_argument naming the bad flag.
DriverArgs parse_args(int argc, char** argv) {
  DriverArgs args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (flag == "--backend") {
      args.backend = value();
    } else if (flag == "--option") {
      args.options.push_back(value());
    } else if (flag == "--case") {
      args.cases.push_back(value());
    } else if (flag == "--timeout-ms") {
      const std::string text = value();
      args.timeout_ms = std::stoll(text);
      if (args.timeout_ms <= 0) throw std::invalid_argument("--timeout-ms must be > 0: " + text);
    } else {
      throw std::invalid_argument("unknown argument '" + std::string(flag) + "'");
    }
  }
  if (args.backend.empty()) throw std::invalid_argument("--backend is required");
  return args;
}

// The cases to run, in table order; throws naming an unknown case.
std::vector<const CaseInfo*> select_cases(const std::vector<std::string>& names) {
  std::vector<const CaseInfo*> selected;
  for (const auto& c : all_cases()) {
    bool wanted = names.empty();
    for (const auto& n : names) wanted = wanted || n == c.name;
    if (wanted) selected.push_back(&c);
  }
  for (const auto& n : names) {
    bool known = false;
    for (const auto& c : all_cases()) known = known || n == c.name;
    if (!known) throw std::invalid_argument("no conformance case named '" + n + "'");
  }
  return selected;
}

int run(const DriverArgs& args) {
  PluginRegistry registry;
  registry.scan(PluginRegistry::search_path({TESSERA_CONFORMANCE_PLUGIN_DIR}));
  const toml::table options = parse_option_overrides(args.options);
  BackendSettings settings;
  settings.world_size = -1;
  settings.timeout = std::chrono::milliseconds(args.timeout_ms);
  const auto cases = select_cases(args.cases);
  auto backend = open_backend(registry, args.backend, &options,
                              "tessera_conformance_rank: --option", settings);
  if (backend->thread_ranks()) {
    throw std::invalid_argument("backend '" + args.backend +
                                "' runs ranks as threads; use tessera_conformance_tests");
  }
  std::unique_ptr<Communicator> world = backend->connect(-1);
  const int rank = world->rank();
  const int size = world->size();
  int skipped = 0;
  for (const CaseInfo* c : cases) {
    if (size < c->min_ranks) {
      std::printf("rank %d: %s skipped (needs %d ranks, have %d)\n", rank, c->name.data(),
                  c->min_ranks, size);
      ++skipped;
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      c->fn(*world, CaseParams{});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s FAILED on backend '%s' with %d ranks: %s\n", rank,
                   c->name.data(), args.backend.c_str(), size, e.what());
      std::fflush(stderr);
      world->abort("rank " + std::to_string(rank) + " failed case '" + std::string(c->name) + "'");
      // The other ranks may be stuck in the failed group: leave without the
      // orderly teardown that would wait for them.
      std::_Exit(1);
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    std::printf("rank %d: %s ok (%lld ms)\n", rank, c->name.data(), static_cast<long long>(ms));
    std::fflush(stdout);
  }
  world->barrier();
  std::printf("rank %d: %zu case(s) passed, %d skipped, on backend '%s' with %d ranks\n", rank,
              cases.size() - static_cast<size_t>(skipped), skipped, args.backend.c_str(), size);
  return 0;
}

}  // namespace
}  // namespace tessera::conformance

int main(int argc, char** argv) {
  tessera::init_logging();
  tessera::conformance::DriverArgs args;
  try {
    args = tessera::conformance::parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera_conformance_rank: %s\n%s", e.what(),
                 tessera::conformance::kUsage.data());
    return 2;
  }
  try {
    return tessera::conformance::run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera_conformance_rank: %s\n", e.what());
    return 1;
  }
}

#include "process_ranks.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "../support/child_process.hpp"
#include "../support/temp_dir.hpp"
#include "tessera/core/options.hpp"
#include "tessera/core/plugin_registry.hpp"

#ifndef TESSERA_GLOO_TEST_PLUGIN_DIR
#error "TESSERA_GLOO_TEST_PLUGIN_DIR must name the build tree's plugin directory"
#endif

namespace tessera::glootest {

std::vector<RankOutcome> run_ranks(int world_size, const std::vector<int>& ranks,
                                   const std::map<std::string, std::string>& env,
                                   const Scenario& scenario, std::chrono::milliseconds limit) {
  const test::TempDir dir("gloo");
  const std::string run_id = "test-" + std::to_string(::getpid());
  std::vector<std::unique_ptr<test::ChildProcess>> children;
  for (const int rank : ranks) {
    test::ChildOptions options;
    options.output = test::ChildOutput::kInherit;
    options.set = {{"RANK", std::to_string(rank)},
                   {"WORLD_SIZE", std::to_string(world_size)},
                   {"TESSERA_RENDEZVOUS_DIR", dir.path().string()},
                   {"TESSERA_RUN_ID", run_id}};
    for (const auto& [k, v] : env) options.set.emplace_back(k, v);
    // The scenario's text goes through a file of the child's own.
    const std::filesystem::path report = dir / ("rank" + std::to_string(rank) + ".txt");
    children.push_back(std::make_unique<test::ChildProcess>(
        [&scenario, rank, report] {
          std::string text;
          int code = 1;
          try {
            code = scenario(rank, text);
          } catch (const std::exception& e) {
            text = std::string("uncaught exception: ") + e.what();
          }
          std::ofstream(report, std::ios::binary) << text;
          return code;
        },
        options));
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<RankOutcome> outcomes;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const test::ChildExit e = children[i]->wait(std::max(left, std::chrono::milliseconds(0)));
    RankOutcome outcome;
    outcome.rank = ranks[i];
    if (e.timed_out) {
      outcome.exit_code = -SIGKILL;
      outcome.text = "still running after the test's limit: killed";
    } else {
      outcome.exit_code = e.signal != 0 ? -e.signal : e.code;
      outcome.text = test::read_text(dir / ("rank" + std::to_string(ranks[i]) + ".txt"));
    }
    outcomes.push_back(outcome);
  }
  return outcomes;
}

std::unique_ptr<Backend> open_gloo(const std::vector<std::string>& options,
                                   std::chrono::milliseconds timeout, int world_size,
                                   bool joining) {
  PluginRegistry registry;
  registry.scan(PluginRegistry::search_path({TESSERA_GLOO_TEST_PLUGIN_DIR}));
  const toml::table table = parse_option_overrides(options);
  BackendSettings settings;
  settings.world_size = world_size;
  settings.timeout = timeout;
  settings.joining = joining;
  return open_backend(registry, "gloo", &table, "test options", settings);
}

}  // namespace tessera::glootest

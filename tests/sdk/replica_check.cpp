// tessera_sdk_replica_check: runs one training through run_training() and
// asks every rank's strategy for all it holds at the end (the
// TESSERA_STATE_ALL_REPLICAS save, which `tessera train` never makes), then
// compares the ranks' parameter tensors bit for bit. The sdk test of
// examples/third_party_strategy uses it to see each replica of a strategy
// built outside the tree, which a checkpoint (one copy of each element)
// cannot show.
//
//   tessera_sdk_replica_check CONFIG --plugin-path DIR [--plugin-path DIR ...]
//                             [--set section.key=value ...]
//
// Prints one line and exits 0 when every rank holds rank 0's parameters,
// 3 when some tensor differs (naming the first), 1 on any error, 2 on a
// wrong command line.
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/core/config.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/core/train/trainer.hpp"

namespace {

int usage(const char* message) {
  std::cerr << "tessera_sdk_replica_check: " << message
            << "\nusage: tessera_sdk_replica_check CONFIG --plugin-path DIR ... [--set K=V ...]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path config_file;
  std::vector<std::filesystem::path> plugin_dirs;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--set" && i + 1 < argc) {
      overrides.emplace_back(argv[++i]);
    } else if (arg == "--plugin-path" && i + 1 < argc) {
      plugin_dirs.emplace_back(argv[++i]);
    } else if (!arg.empty() && arg[0] != '-' && config_file.empty()) {
      config_file = arg;
    } else {
      return usage(("unexpected argument '" + arg + "'").c_str());
    }
  }
  if (config_file.empty()) return usage("CONFIG is required");
  if (plugin_dirs.empty()) return usage("at least one --plugin-path is required");
  try {
    const tessera::Config config = tessera::load_config(config_file, overrides);
    tessera::PluginRegistry registry;
    registry.scan(plugin_dirs);
    std::ostringstream log;
    tessera::train::RunOptions options;
    options.out = &log;
    options.collect_final_state = true;
    const tessera::train::RunResult result =
        tessera::train::run_training(config, registry, options);
    const auto& states = result.final_state;
    if (states.size() < 2) {
      std::cerr << "tessera_sdk_replica_check: " << states.size()
                << " rank state(s) collected; replicas need at least 2 thread ranks\n";
      return 1;
    }
    int tensors = 0;
    for (const auto& [name, tensor] : states[0].tensors) {
      if (name.rfind("optim.", 0) == 0) continue;  // optimizer state may be per rank
      ++tensors;
      const std::vector<float> first = states[0].full(name);
      for (size_t r = 1; r < states.size(); ++r) {
        const std::vector<float> other = states[r].full(name);
        if (other.size() != first.size() ||
            std::memcmp(other.data(), first.data(), first.size() * sizeof(float)) != 0) {
          std::cout << "replicas differ: rank " << r << " and rank 0 hold different values of '"
                    << name << "' after step " << result.last_step << "\n";
          return 3;
        }
      }
    }
    std::cout << "replicas identical: " << tensors << " parameter tensors on " << states.size()
              << " ranks after step " << result.last_step << ", final loss " << result.final_loss
              << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "tessera_sdk_replica_check: error: " << e.what() << "\n";
    return 1;
  }
}

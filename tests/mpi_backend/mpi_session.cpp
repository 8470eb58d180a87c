#include "mpi_session.hpp"

#include "tessera/core/options.hpp"
#include "tessera/core/plugin_registry.hpp"

#ifndef TESSERA_MPI_TEST_PLUGIN_DIR
#error "TESSERA_MPI_TEST_PLUGIN_DIR must name the build tree's plugin directory"
#endif

namespace tessera::mpitest {
namespace {

const PluginRegistry& registry() {
  static const PluginRegistry* const instance = [] {
    auto* reg = new PluginRegistry();  // NOLINT(cppcoreguidelines-owning-memory): lives until exit
    reg->scan({std::filesystem::path(TESSERA_MPI_TEST_PLUGIN_DIR)});
    return reg;
  }();
  return *instance;
}

std::unique_ptr<Backend> open_with(const std::vector<std::string>& options,
                                   std::chrono::milliseconds timeout, int world_size) {
  const toml::table table = parse_option_overrides(options);
  BackendSettings settings;
  settings.world_size = world_size;
  settings.timeout = timeout;
  return open_backend(registry(), "mpi", &table, "mpi backend test options", settings);
}

struct World {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;
};

World& world_state() {
  static World w;
  return w;
}

}  // namespace

std::unique_ptr<Backend> open_mpi(std::vector<std::string> options,
                                  std::chrono::milliseconds timeout, int world_size) {
  options.emplace_back("finalize=false");
  return open_with(options, timeout, world_size);
}

Communicator& world() {
  World& w = world_state();
  if (!w.comm) {
    w.backend = open_with({"finalize=true"}, std::chrono::seconds(20), -1);
    w.comm = w.backend->connect(-1);
  }
  return *w.comm;
}

void close_world() {
  World& w = world_state();
  w.comm.reset();
  w.backend.reset();
}

}  // namespace tessera::mpitest

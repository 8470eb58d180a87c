#include "version_command.hpp"

#include "tessera/c/selector.h"

#include "cli_error.hpp"
#include "tessera/c/backend.h"
#include "tessera/c/common.h"
#include "tessera/c/compressor.h"
#include "tessera/c/model.h"
#include "tessera/c/strategy.h"
#include "tessera/core/plugin_registry.hpp"

#ifndef TESSERA_VERSION_STRING
#error "TESSERA_VERSION_STRING must be defined by the build"
#endif

namespace tessera::cli {

CLI::App* add_version_command(CLI::App& app) {
  return app.add_subcommand(
      "version", "Print the versions of Tessera, the plugin ABI and each kind's interface");
}

int run_version_command(std::ostream& out) {
  out << "tessera " << TESSERA_VERSION_STRING << '\n'
      << "plugin ABI " << TESSERA_ABI_MAJOR << '.' << TESSERA_ABI_MINOR
      << " (accepts plugins of ABI " << TESSERA_ABI_MAJOR << ".x)\n"
      << "interfaces: backend " << TESSERA_BACKEND_API_MAJOR << '.' << TESSERA_BACKEND_API_MINOR
      << ", strategy " << TESSERA_STRATEGY_API_MAJOR << '.' << TESSERA_STRATEGY_API_MINOR
      << ", model " << TESSERA_MODEL_API_MAJOR << '.' << TESSERA_MODEL_API_MINOR << ", selector "
      << TESSERA_SELECTOR_API_MAJOR << '.' << TESSERA_SELECTOR_API_MINOR << ", compressor "
      << TESSERA_COMPRESSOR_API_MAJOR << '.' << TESSERA_COMPRESSOR_API_MINOR << '\n'
      << "accepts: " << supported_interfaces() << '\n';
  return kExitOk;
}

}  // namespace tessera::cli

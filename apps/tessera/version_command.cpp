#include "version_command.hpp"

#include "cli_error.hpp"
#include "tessera/c/common.h"

#ifndef TESSERA_VERSION_STRING
#error "TESSERA_VERSION_STRING must be defined by the build"
#endif

namespace tessera::cli {

CLI::App* add_version_command(CLI::App& app) {
  return app.add_subcommand("version", "Print the versions of Tessera and of the plugin ABI");
}

int run_version_command(std::ostream& out) {
  out << "tessera " << TESSERA_VERSION_STRING << '\n'
      << "plugin ABI " << TESSERA_ABI_MAJOR << '.' << TESSERA_ABI_MINOR
      << " (accepts plugins of ABI " << TESSERA_ABI_MAJOR << ".x)\n";
  return kExitOk;
}

}  // namespace tessera::cli

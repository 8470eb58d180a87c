// `tessera version`: the Tessera release and the plugin ABI this host speaks.
#pragma once

#include <ostream>

#include "cli11.hpp"

namespace tessera::cli {

// Registers the `version` subcommand on `app`.
CLI::App* add_version_command(CLI::App& app);

// Prints "tessera <version>" and "plugin ABI <major>.<minor>" (plugins of
// the same major and any minor are accepted). Never fails.
int run_version_command(std::ostream& out);

}  // namespace tessera::cli

// `tessera plugins`: what the plugin search path holds, and the details of
// one plugin (`--describe NAME [--kind KIND]`), as a table or as JSON.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "cli11.hpp"

#include "global_options.hpp"
#include "tessera/core/plugin_registry.hpp"

namespace tessera::cli {

struct PluginsArgs {
  bool json = false;
  std::string describe;  // empty: list everything
  std::string kind;      // optional filter for --describe
};

// Registers the `plugins` subcommand on `app`, storing its flags in `args`.
CLI::App* add_plugins_command(CLI::App& app, PluginsArgs& args);

// Runs the subcommand: scans the plugin path and prints either the listing
// or one description to `out`. Returns the exit code. Throws UsageError for
// an unknown --kind or --kind without --describe, and tessera::Error when
// the described plugin is not found (the message lists what is available).
int run_plugins_command(const GlobalOptions& global, const PluginsArgs& args, std::ostream& out);

// Listing of every record of `session` (loaded and rejected), sorted by kind,
// then name, then path; as a table followed by the search path, or as JSON
// {"search_path": [...], "plugins": [{kind, name, version, abi, status,
// file, reason, summary}]}.
void print_plugin_list(const Session& session, bool json, std::ostream& out);

// Capability bits (TESSERA_BACKEND_CAP_*) of a backend plugin's descriptor;
// 0 for another kind or an interface table too small to hold them.
uint32_t backend_capabilities(const tessera_plugin_descriptor& descriptor) noexcept;

// Description of the loaded plugin `name` (of `kind` when not empty): kind,
// version, ABI, file, summary, backend capabilities, and its declared options
// (key, type, default, help). Throws tessera::Error if no loaded plugin
// matches (naming any rejected file that claimed the name and listing the
// available plugins) or if the name is ambiguous across kinds.
void print_plugin_description(const PluginRegistry& registry, const std::string& name,
                              const std::string& kind, bool json, std::ostream& out);

}  // namespace tessera::cli

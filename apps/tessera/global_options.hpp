// Options every subcommand shares (--plugin-path, --config, --log-level) and
// the session they produce: logging set up and a plugin registry scanned
// along the resulting search path.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli11.hpp"

#include "tessera/core/config.hpp"
#include "tessera/core/plugin_registry.hpp"

namespace tessera::cli {

struct GlobalOptions {
  std::vector<std::string> plugin_paths;  // --plugin-path, in the order given
  std::string config_file;                // --config; empty: none
  std::string log_level;                  // --log-level; empty: config or environment
};

// Registers the global flags on the top-level app. They are accepted before
// or after the subcommand name.
void add_global_options(CLI::App& app, GlobalOptions& options);

// A loaded plugin registry and the directories it scanned, in order.
struct Session {
  std::unique_ptr<PluginRegistry> registry;
  std::vector<std::filesystem::path> search_path;
};

// Loads the config (if --config was given), sets up logging at --log-level,
// else the config's run.log_level, else TESSERA_LOG_LEVEL, else
// `default_level` (a command that prints what the log would say, like the
// plugin listing, passes "error");
// then builds the search path (--plugin-path dirs, the config's [plugins]
// paths, TESSERA_PLUGIN_PATH, the built-in plugin directory), applies the
// config's [plugins] allow list and scans. Broken plugin files are recorded
// in the registry, never thrown. Throws UsageError for an unknown log level
// or a --plugin-path that is not an existing directory, and tessera::Error
// if the config file is missing or invalid or one of its [plugins] paths is
// not an existing directory (naming the file and line).
Session open_session(const GlobalOptions& options, const std::string& default_level = "warn");

// For commands that take their configuration as a CONFIG argument
// (`command` is e.g. "tessera train"): throws UsageError naming the command
// and the file when the global --config was given too.
void refuse_global_config(const GlobalOptions& options, const std::string& command);

// For commands that use none of the global flags (`tessera version`,
// `tessera checkpoint convert`): they are still checked, so that a mistake
// in them is not silently taken: UsageError for an unknown --log-level, a
// --plugin-path that is not an existing directory, or any --config.
void check_unused_global_options(const GlobalOptions& options, const std::string& command);

// Registers `--set SECTION.KEY=VALUE` (repeatable) on `cmd`, collecting into
// `overrides`. A value that is not of that shape (no '=', or no dotted key
// before it) is a usage error; what the key and value mean is checked with
// the configuration.
void add_set_option(CLI::App* cmd, std::vector<std::string>& overrides, const std::string& help);

// The same with a configuration the command has loaded itself (`tessera
// train CONFIG`, with its overrides); options.config_file is not read.
Session open_session(const GlobalOptions& options, const Config& config,
                     const std::string& default_level = "warn");

}  // namespace tessera::cli

#include "global_options.hpp"

#include <cstdlib>
#include <optional>

#include "cli_error.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/logging.hpp"

namespace tessera::cli {

void add_global_options(CLI::App& app, GlobalOptions& options) {
  app.add_option("--plugin-path", options.plugin_paths,
                 "Directory to scan for plugins before TESSERA_PLUGIN_PATH and the built-in "
                 "directory (repeatable)")
      ->type_name("DIR")
      ->allow_extra_args(false);
  app.add_option("--config", options.config_file,
                 "Run configuration (TOML); its [plugins] paths/allow and run.log_level apply")
      ->type_name("FILE");
  app.add_option(
         "--log-level", options.log_level,
         "trace, debug, info, warn, error, critical or off (default: warn; error for `plugins`)")
      ->type_name("LEVEL");
}

namespace {

std::string choose_log_level(const GlobalOptions& options, const Config* config,
                             const std::string& default_level) {
  if (!options.log_level.empty()) {
    if (!parse_log_level(options.log_level)) {
      throw UsageError("unknown log level '" + options.log_level +
                       "' for --log-level (use trace, debug, info, warn, error, critical or off)");
    }
    return options.log_level;
  }
  if (config && !config->run.log_level.empty()) return config->run.log_level;
  // Read once at start-up, before any thread exists.
  const char* env = std::getenv("TESSERA_LOG_LEVEL");  // NOLINT(concurrency-mt-unsafe)
  if (env != nullptr && *env != '\0') return {};       // init_logging reads it
  return default_level;
}

// The session for `config` (if any): logging, search path, allow list, scan.
Session open_with(const GlobalOptions& options, const Config* config,
                  const std::string& default_level) {
  init_logging(choose_log_level(options, config, default_level));

  std::vector<std::filesystem::path> first;
  first.reserve(options.plugin_paths.size());
  for (const auto& p : options.plugin_paths) first.emplace_back(p);
  if (config) first.insert(first.end(), config->plugins.paths.begin(), config->plugins.paths.end());

  Session session;
  session.search_path = PluginRegistry::search_path(first);
  session.registry = std::make_unique<PluginRegistry>();
  if (config && !config->plugins.allow.empty()) {
    session.registry->set_allow_list(config->plugins.allow);
  }
  session.registry->scan(session.search_path);
  return session;
}

}  // namespace

Session open_session(const GlobalOptions& options, const std::string& default_level) {
  std::optional<Config> config;
  if (!options.config_file.empty()) config = load_config(options.config_file);
  return open_with(options, config ? &*config : nullptr, default_level);
}

Session open_session(const GlobalOptions& options, const Config& config,
                     const std::string& default_level) {
  return open_with(options, &config, default_level);
}

void refuse_global_config(const GlobalOptions& options, const std::string& command) {
  if (options.config_file.empty()) return;
  throw UsageError("--config is not used by '" + command +
                   "': the configuration is its CONFIG argument (got --config " +
                   options.config_file + ")");
}

}  // namespace tessera::cli

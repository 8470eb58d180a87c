#include "global_options.hpp"

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "cli_error.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/sdk/error.hpp"

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

// Why `dir` cannot be scanned for plugins ("does not exist", "is not a
// directory"), or an empty string when it can.
std::string directory_problem(const std::filesystem::path& dir) {
  std::error_code ec;
  const auto status = std::filesystem::status(dir, ec);
  if (status.type() == std::filesystem::file_type::not_found) return "does not exist";
  if (ec) return "cannot be read (" + ec.message() + ")";
  if (!std::filesystem::is_directory(status)) return "is not a directory";
  return {};
}

// Directories named on the command line or in the config must exist: a
// misspelt one would otherwise just leave its plugins out. (Entries of
// TESSERA_PLUGIN_PATH only get a warning, from PluginRegistry::search_path.)
void check_plugin_dirs(const GlobalOptions& options, const Config* config) {
  for (const std::string& dir : options.plugin_paths) {
    if (const std::string problem = directory_problem(dir); !problem.empty()) {
      throw UsageError(fmt::format("--plugin-path '{}' {}", dir, problem));
    }
  }
  if (config == nullptr) return;
  const PluginsSection& plugins = config->plugins;
  for (std::size_t i = 0; i < plugins.paths.size(); ++i) {
    const std::string problem = directory_problem(plugins.paths[i]);
    if (problem.empty()) continue;
    std::string where = i < plugins.path_sources.size() ? plugins.path_sources[i] : "";
    if (where.empty()) where = config->file.empty() ? "config" : config->file.string();
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                fmt::format("{}: 'plugins.paths' entry '{}' {}", where, plugins.paths[i].string(),
                            problem));
  }
}

// The session for `config` (if any): logging, search path, allow list, scan.
Session open_with(const GlobalOptions& options, const Config* config,
                  const std::string& default_level) {
  init_logging(choose_log_level(options, config, default_level));
  check_plugin_dirs(options, config);

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

void check_unused_global_options(const GlobalOptions& options, const std::string& command) {
  (void)choose_log_level(options, nullptr, "warn");
  check_plugin_dirs(options, nullptr);
  if (!options.config_file.empty()) {
    throw UsageError("--config is not used by '" + command + "' (got --config " +
                     options.config_file + ")");
  }
}

void add_set_option(CLI::App* cmd, std::vector<std::string>& overrides, const std::string& help) {
  const CLI::Validator shape(
      [](std::string& value) -> std::string {
        const size_t eq = value.find('=');
        const size_t dot = value.find('.');
        if (eq == std::string::npos || dot == std::string::npos || dot == 0 || dot + 1 >= eq) {
          return "'" + value + "' is not SECTION.KEY=VALUE (e.g. --set run.steps=500)";
        }
        return {};
      },
      "SECTION.KEY=VALUE");
  cmd->add_option("--set", overrides, help)
      ->type_name("SECTION.KEY=VALUE")
      ->check(shape)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void refuse_global_config(const GlobalOptions& options, const std::string& command) {
  if (options.config_file.empty()) return;
  throw UsageError("--config is not used by '" + command +
                   "': the configuration is its CONFIG argument (got --config " +
                   options.config_file + ")");
}

}  // namespace tessera::cli

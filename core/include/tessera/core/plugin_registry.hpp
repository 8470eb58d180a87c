// Discovery and loading of plugin libraries.
//
// The registry scans directories for files named libtessera_<kind>_<name>.so,
// inspects each (ELF structure and exports, without running plugin code),
// loads it first in a probe process (so a library that crashes or hangs while
// loading is rejected, not fatal; outcomes are cached per file), loads it
// with Boost.DLL, reads and checks its descriptor, and keeps every accepted
// library alive for as long as any object made from it. A file that fails
// any check is recorded with its path and reason and skipped: loading never
// crashes the host and never substitutes another plugin.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/c/plugin.h"
#include "tessera/core/host_api.hpp"

namespace tessera {

// One accepted plugin library. Shared by everything created from it.
class LoadedPlugin {
 public:
  virtual ~LoadedPlugin() = default;
  [[nodiscard]] virtual const tessera_plugin_descriptor& descriptor() const noexcept = 0;
  [[nodiscard]] virtual const std::filesystem::path& path() const noexcept = 0;
  // Host API for this plugin (logger "<kind>.<name>").
  [[nodiscard]] virtual const HostContext& host() const noexcept = 0;

  [[nodiscard]] tessera_plugin_kind kind() const noexcept { return descriptor().kind; }
  [[nodiscard]] std::string_view name() const noexcept { return descriptor().name; }
};

// Version of a plugin's interface table (TESSERA_<KIND>_API_MAJOR.MINOR it
// was built with). A descriptor of ABI 1.0-1.2, from before kinds had their
// own versions, has interface 1.<abi_minor>.
struct InterfaceVersion {
  int major = -1;
  int minor = -1;
};
[[nodiscard]] InterfaceVersion interface_version(const tessera_plugin_descriptor& d) noexcept;

// The interface majors this host accepts, per kind: "backend 1.x, strategy
// 2.x, compressor 1.x, ..." ("none yet" for a kind without one).
[[nodiscard]] std::string supported_interfaces();

// What the scan found for one file, accepted or not.
struct PluginRecord {
  std::filesystem::path path;
  std::string kind;     // from the descriptor, or from the file name if unread
  std::string name;     // likewise
  std::string version;  // empty if unread
  std::string summary;
  int abi_major = -1;  // descriptor ABI; -1 if unread
  int abi_minor = -1;
  int api_major = -1;  // version of the kind's interface table; -1 if unread
  int api_minor = -1;
  bool loaded = false;  // accepted and usable
  std::string reason;   // why it was rejected; empty when loaded
};

class PluginRegistry {
 public:
  PluginRegistry();
  ~PluginRegistry();
  PluginRegistry(const PluginRegistry&) = delete;
  PluginRegistry& operator=(const PluginRegistry&) = delete;

  // Scans `dirs` in order (missing directories are recorded as a debug log,
  // not an error). The first accepted plugin of a kind/name wins; later
  // files with the same kind/name are rejected as duplicates naming the
  // first one's path. May be called again to add directories.
  void scan(const std::vector<std::filesystem::path>& dirs);

  // Loads one file by path (same checks as scan); returns its record.
  const PluginRecord& load_file(const std::filesystem::path& file);

  // Every file seen, in scan order.
  [[nodiscard]] const std::vector<PluginRecord>& records() const noexcept;

  // The accepted plugin `name` of `kind`, or nullptr.
  [[nodiscard]] std::shared_ptr<LoadedPlugin> find(tessera_plugin_kind kind,
                                                   std::string_view name) const;
  // Like find, but throws tessera::Error naming the kind, the name, the
  // available names, and any rejected file that claimed that name.
  [[nodiscard]] std::shared_ptr<LoadedPlugin> get(tessera_plugin_kind kind,
                                                  std::string_view name) const;
  // Names of accepted plugins of `kind`, sorted.
  [[nodiscard]] std::vector<std::string> names(tessera_plugin_kind kind) const;

  // Allow-list: when non-empty, only these plugin names are loaded; others
  // are recorded as "not in [plugins] allow". Call before scan.
  void set_allow_list(std::vector<std::string> names);

  // The default search path: `config_paths`, then each entry of
  // TESSERA_PLUGIN_PATH (colon separated), then the directory next to the
  // running executable (<exe dir>/../lib/tessera/plugins).
  static std::vector<std::filesystem::path> search_path(
      const std::vector<std::filesystem::path>& config_paths);

  // Directory of the build or install tree's own plugins.
  static std::filesystem::path builtin_dir();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Parses "libtessera_<kind>_<name>.so" into kind and name; false if the
// file name does not follow the pattern.
bool parse_plugin_filename(const std::string& filename, std::string& kind, std::string& name);

// Kind from its name ("backend" -> TESSERA_KIND_BACKEND); -1 if unknown.
int plugin_kind_from_name(std::string_view name) noexcept;

}  // namespace tessera

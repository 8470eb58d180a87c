// Where plugins are looked for, and how their file names are read.
#include <cstdlib>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <boost/dll/runtime_symbol_info.hpp>

#include "plugin_descriptor.hpp"
#include "plugin_paths.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/plugin_registry.hpp"

#ifndef TESSERA_PLUGIN_INSTALL_SUBDIR
#define TESSERA_PLUGIN_INSTALL_SUBDIR "lib/tessera/plugins"
#endif

namespace tessera {
namespace {

constexpr std::string_view kPrefix = "libtessera_";
constexpr std::string_view kSuffix = ".so";

bool all_of_charset(std::string_view text, bool allow_underscore) noexcept {
  if (text.empty()) return false;
  for (const char c : text) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (allow_underscore && c == '_');
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string detail::directory_key(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::path key = std::filesystem::weakly_canonical(dir, ec);
  if (ec) key = std::filesystem::absolute(dir, ec).lexically_normal();
  // "a/b/" and "a/b" name the same directory.
  if (!key.has_filename() && key.has_relative_path()) key = key.parent_path();
  return key.string();
}

bool detail::meant_as_plugin(std::string_view filename) noexcept {
  return filename.size() > kPrefix.size() + kSuffix.size() && filename.starts_with(kPrefix) &&
         filename.ends_with(kSuffix);
}

namespace {

// The kind and name parts of a plugin's file name, or what is wrong with it.
struct FilenameParts {
  std::string_view kind;
  std::string_view name;
  std::string problem;  // empty when the name follows the pattern
};

FilenameParts split_plugin_filename(std::string_view filename) {
  constexpr std::string_view kPattern =
      "file name does not follow the pattern libtessera_<kind>_<name>.so";
  if (!detail::meant_as_plugin(filename)) return {{}, {}, std::string(kPattern)};
  const std::string_view middle =
      filename.substr(kPrefix.size(), filename.size() - kPrefix.size() - kSuffix.size());
  const std::size_t split = middle.find('_');
  if (split == std::string_view::npos || split + 1 == middle.size()) {
    return {
        {}, {}, fmt::format("{}: no name after the kind '{}'", kPattern, middle.substr(0, split))};
  }
  FilenameParts parts{middle.substr(0, split), middle.substr(split + 1), {}};
  if (!all_of_charset(parts.kind, false)) {
    parts.problem =
        fmt::format("{}: the kind '{}' must be lowercase letters and digits", kPattern, parts.kind);
  } else if (!all_of_charset(parts.name, true)) {
    parts.problem = fmt::format("{}: the name '{}' must be lowercase letters, digits and '_'",
                                kPattern, parts.name);
  }
  return parts;
}

}  // namespace

std::string detail::plugin_filename_problem(std::string_view filename) {
  return split_plugin_filename(filename).problem;
}

bool parse_plugin_filename(const std::string& filename, std::string& kind, std::string& name) {
  const FilenameParts parts = split_plugin_filename(filename);
  if (!parts.problem.empty()) return false;
  kind.assign(parts.kind);
  name.assign(parts.name);
  return true;
}

int plugin_kind_from_name(std::string_view name) noexcept {
  for (int kind = 0; kind < TESSERA_KIND_COUNT; ++kind) {
    if (name == detail::plugin_kind_name(kind)) return kind;
  }
  return -1;
}

std::filesystem::path PluginRegistry::builtin_dir() {
  std::error_code ec;
  const std::filesystem::path exe = boost::dll::program_location(ec);
  if (ec || exe.empty()) return {};
  const std::filesystem::path prefix = exe.parent_path() / "..";
  std::filesystem::path build_layout = (prefix / "lib" / "tessera" / "plugins").lexically_normal();
  // An install tree whose library directory is not "lib" (e.g. lib64 or a
  // multiarch directory) keeps its plugins under that directory instead.
  std::filesystem::path install_layout =
      (prefix / TESSERA_PLUGIN_INSTALL_SUBDIR).lexically_normal();
  if (install_layout != build_layout && !std::filesystem::is_directory(build_layout, ec) &&
      std::filesystem::is_directory(install_layout, ec)) {
    return install_layout;
  }
  return build_layout;
}

std::vector<std::filesystem::path> PluginRegistry::search_path(
    const std::vector<std::filesystem::path>& config_paths) {
  std::vector<std::filesystem::path> candidates = config_paths;
  // The environment is only read here; nothing in the host writes it.
  if (const char* env = std::getenv("TESSERA_PLUGIN_PATH");  // NOLINT(concurrency-mt-unsafe)
      env != nullptr) {
    const std::string_view value = env;
    std::size_t start = 0;
    while (start <= value.size()) {
      std::size_t end = value.find(':', start);
      if (end == std::string_view::npos) end = value.size();
      const std::string entry(value.substr(start, end - start));
      std::error_code ec;
      if (!entry.empty() && !std::filesystem::exists(entry, ec)) {
        // Only a warning: the variable is often set once for several
        // machines or build trees, and some of its directories may be
        // missing on this one.
        get_logger("core")->warn("TESSERA_PLUGIN_PATH entry '{}' does not exist; ignored", entry);
      }
      candidates.emplace_back(entry);
      start = end + 1;
    }
  }
  candidates.push_back(builtin_dir());

  std::vector<std::filesystem::path> result;
  std::set<std::string> seen;
  for (const std::filesystem::path& p : candidates) {
    if (p.empty()) continue;  // empty entries of TESSERA_PLUGIN_PATH mean nothing
    if (seen.insert(detail::directory_key(p)).second) result.push_back(p);
  }
  return result;
}

}  // namespace tessera

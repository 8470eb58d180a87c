// The plugin registry: examines candidate files in a fixed order (file name,
// allow-list, ELF structure and exports, dynamic loading, descriptor, then
// duplicates), records every outcome, and keeps accepted libraries mapped
// for as long as anything made from them is alive. The allow-list is applied
// from the file name, before the library is mapped, so an excluded plugin's
// code never runs. A registry is used from one thread at a time.
#include "tessera/core/plugin_registry.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <boost/dll/shared_library.hpp>

#include "plugin_descriptor.hpp"
#include "plugin_elf.hpp"
#include "plugin_paths.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// An accepted plugin library. The library handle is the first member, so it
// is released last, after the host context that the plugin may still
// reference while its objects are destroyed.
class LibraryPlugin final : public LoadedPlugin {
 public:
  LibraryPlugin(boost::dll::shared_library library, const tessera_plugin_descriptor* descriptor,
                fs::path path)
      : library_(std::move(library)),
        descriptor_(descriptor),
        path_(std::move(path)),
        host_(fmt::format("{}.{}", detail::plugin_kind_name(descriptor->kind), descriptor->name)) {}

  [[nodiscard]] const tessera_plugin_descriptor& descriptor() const noexcept override {
    return *descriptor_;
  }
  [[nodiscard]] const fs::path& path() const noexcept override { return path_; }
  [[nodiscard]] const HostContext& host() const noexcept override { return host_; }

 private:
  boost::dll::shared_library library_;
  const tessera_plugin_descriptor* descriptor_;
  fs::path path_;
  HostContext host_;
};

// The dynamic loader's own explanation from a Boost.DLL load failure, which
// wraps it as "<call> failed (dlerror system message: <text>): <errno text>";
// the whole message when it has no such part.
std::string loader_message(const std::exception& e) {
  std::string what = e.what();
  constexpr std::string_view kMarker = "(dlerror system message: ";
  const std::size_t begin = what.find(kMarker);
  const std::size_t end = what.rfind(')');
  if (begin == std::string::npos || end == std::string::npos || end < begin + kMarker.size()) {
    return what;
  }
  return what.substr(begin + kMarker.size(), end - begin - kMarker.size());
}

// Identity of a candidate file: the canonical directory plus the file's own
// name, so a symlinked plugin in another directory stays a separate file.
std::string file_key(const fs::path& file) {
  return (fs::path(detail::directory_key(file.parent_path())) / file.filename()).string();
}

std::string kind_label(tessera_plugin_kind kind) {
  const char* name = detail::plugin_kind_name(kind);
  return name != nullptr ? std::string(name) : fmt::format("unknown-kind-{}", kind);
}

}  // namespace

struct PluginRegistry::Impl {
  using Key = std::pair<int, std::string>;

  std::vector<PluginRecord> records;
  // Kind and name each record's file name claimed (empty if it had none).
  std::vector<std::pair<std::string, std::string>> claims;
  std::map<std::string, std::size_t> file_index;  // file_key -> records index
  std::map<Key, std::shared_ptr<LoadedPlugin>> accepted;
  std::vector<fs::path> scanned_dirs;
  std::set<std::string> scanned_dir_keys;
  std::vector<std::string> allow;
  std::shared_ptr<spdlog::logger> log = get_logger("core");

  const PluginRecord& examine(const fs::path& file);
  std::string load(PluginRecord& record, const std::string& file_kind,
                   const std::string& file_name);
};

// Runs every check on one file and stores its record; never throws for a
// bad file.
const PluginRecord& PluginRegistry::Impl::examine(const fs::path& file) {
  const std::string key = file_key(file);
  if (const auto found = file_index.find(key); found != file_index.end()) {
    return records[found->second];
  }
  PluginRecord record;
  std::error_code ec;
  record.path = fs::absolute(file, ec).lexically_normal();
  if (ec) record.path = file;
  std::string file_kind;
  std::string file_name;
  std::string reason;
  bool excluded = false;
  if (!parse_plugin_filename(file.filename().string(), file_kind, file_name)) {
    reason = "file name does not follow the pattern libtessera_<kind>_<name>.so";
  } else {
    record.kind = file_kind;
    record.name = file_name;
    if (plugin_kind_from_name(file_kind) < 0) {
      reason = fmt::format(
          "file name names unknown plugin kind '{}' (expected backend, strategy, compressor, "
          "selector or model)",
          file_kind);
    } else if (!allow.empty() && std::find(allow.begin(), allow.end(), file_name) == allow.end()) {
      reason = "not in [plugins] allow";
      excluded = true;
    } else {
      try {
        reason = load(record, file_kind, file_name);
      } catch (const std::exception& e) {
        reason = fmt::format("unexpected error while loading: {}", e.what());
      }
    }
  }
  record.loaded = reason.empty();
  record.reason = reason;
  if (!record.loaded) {
    // An allow-list exclusion is the user's choice, not a fault of the file.
    log->log(excluded ? spdlog::level::info : spdlog::level::warn, "plugin {} rejected: {}",
             record.path.string(), reason);
  }
  file_index.emplace(key, records.size());
  claims.emplace_back(file_kind, file_name);
  records.push_back(std::move(record));
  return records.back();
}

// Inspects, loads and checks the library at record.path; on success adds it
// to `accepted`. Returns the rejection reason, empty when accepted.
std::string PluginRegistry::Impl::load(PluginRecord& record, const std::string& file_kind,
                                       const std::string& file_name) {
  const fs::path& path = record.path;
  detail::ElfLibraryInfo elf;
  try {
    elf = detail::inspect_elf_library(path);
  } catch (const detail::ElfFormatError& e) {
    return fmt::format("not a valid shared library: {}", e.what());
  }
  const std::string entry_symbol = TESSERA_PLUGIN_ENTRY_SYMBOL;
  std::string no_entry = "does not export " + entry_symbol;
  if (elf.exports_known &&
      std::find(elf.exports.begin(), elf.exports.end(), entry_symbol) == elf.exports.end()) {
    return no_entry;
  }

  boost::dll::shared_library library;
  try {
    // Resolve every symbol now, so a missing one fails here and not inside a
    // later call; keep the plugin's symbols out of the global namespace.
    library.load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    return fmt::format("cannot be loaded: {}", loader_message(e));
  }
  if (!library.has(entry_symbol)) return no_entry;
  // get<> of a function type yields the function itself (get<> of a pointer
  // type would read a pointer variable at the symbol's address).
  const tessera_plugin_entry_fn entry =
      &library.get<std::remove_pointer_t<tessera_plugin_entry_fn>>(entry_symbol);
  const tessera_plugin_descriptor* descriptor = entry();
  if (descriptor == nullptr) return fmt::format("entry point {} returned NULL", entry_symbol);

  std::string reason = detail::check_descriptor(*descriptor, file_kind, file_name, record);
  if (!reason.empty()) return reason;

  const Key id{descriptor->kind, descriptor->name};
  if (const auto first = accepted.find(id); first != accepted.end()) {
    return fmt::format("duplicate of {}", first->second->path().string());
  }
  auto plugin = std::make_shared<LibraryPlugin>(std::move(library), descriptor, path);
  log->debug("loaded {} plugin '{}' {} ({} interface {}.{}, ABI {}.{}) from {}", record.kind,
             record.name, record.version, record.kind, record.api_major, record.api_minor,
             record.abi_major, record.abi_minor, path.string());
  accepted.emplace(id, std::move(plugin));
  return {};
}

PluginRegistry::PluginRegistry() : impl_(std::make_unique<Impl>()) {}

PluginRegistry::~PluginRegistry() = default;

void PluginRegistry::scan(const std::vector<fs::path>& dirs) {
  for (const fs::path& dir : dirs) {
    if (dir.empty() || !impl_->scanned_dir_keys.insert(detail::directory_key(dir)).second) {
      continue;
    }
    impl_->scanned_dirs.push_back(dir);
    std::error_code ec;
    if (!fs::exists(dir, ec)) {
      impl_->log->debug("plugin directory {} does not exist", dir.string());
      continue;
    }
    if (!fs::is_directory(dir, ec)) {
      impl_->log->warn("plugin directory {} is not a directory; skipped", dir.string());
      continue;
    }
    std::vector<fs::path> candidates;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string kind;
      std::string name;
      if (!parse_plugin_filename(it->path().filename().string(), kind, name)) continue;
      std::error_code status_ec;
      if (it->is_directory(status_ec)) continue;  // follows symlinks
      candidates.push_back(it->path());
    }
    if (ec) {
      impl_->log->warn("cannot list plugin directory {}: {}", dir.string(), ec.message());
    }
    std::sort(candidates.begin(), candidates.end());
    for (const fs::path& file : candidates) impl_->examine(file);
  }
}

const PluginRecord& PluginRegistry::load_file(const fs::path& file) { return impl_->examine(file); }

const std::vector<PluginRecord>& PluginRegistry::records() const noexcept { return impl_->records; }

std::shared_ptr<LoadedPlugin> PluginRegistry::find(tessera_plugin_kind kind,
                                                   std::string_view name) const {
  const auto found = impl_->accepted.find(Impl::Key{kind, std::string(name)});
  return found == impl_->accepted.end() ? nullptr : found->second;
}

std::shared_ptr<LoadedPlugin> PluginRegistry::get(tessera_plugin_kind kind,
                                                  std::string_view name) const {
  if (auto plugin = find(kind, name)) return plugin;
  const std::string label = kind_label(kind);
  const std::vector<std::string> available = names(kind);
  std::string message = fmt::format(
      "no {} plugin named '{}' (available: {})", label, name,
      available.empty() ? std::string("none") : fmt::format("{}", fmt::join(available, ", ")));
  bool claimed = false;
  for (std::size_t i = 0; i < impl_->records.size(); ++i) {
    const PluginRecord& r = impl_->records[i];
    const auto& [file_kind, file_name] = impl_->claims[i];
    const bool by_file = file_kind == label && file_name == name;
    const bool by_descriptor = r.kind == label && r.name == name;
    if (r.loaded || !(by_file || by_descriptor)) continue;
    message += fmt::format("; {} in {} was rejected: {}", r.path.filename().string(),
                           r.path.parent_path().string(), r.reason);
    claimed = true;
  }
  if (!claimed) {
    std::vector<std::string> dirs;
    for (const fs::path& d : impl_->scanned_dirs) dirs.push_back(d.string());
    message += dirs.empty() ? std::string("; no plugin directory was scanned")
                            : fmt::format("; searched {}", fmt::join(dirs, ", "));
  }
  throw Error(TESSERA_ERR_INVALID_ARGUMENT, message);
}

std::vector<std::string> PluginRegistry::names(tessera_plugin_kind kind) const {
  std::vector<std::string> result;
  for (const auto& [id, plugin] : impl_->accepted) {
    if (id.first == kind) result.push_back(id.second);
  }
  return result;  // the map orders names within a kind
}

void PluginRegistry::set_allow_list(std::vector<std::string> names) {
  impl_->allow = std::move(names);
}

}  // namespace tessera

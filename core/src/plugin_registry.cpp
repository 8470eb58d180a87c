// The plugin registry: examines candidate files in a fixed order (file name,
// allow-list, ELF structure and exports, a probe load in a child process,
// dynamic loading, descriptor, then duplicates), records every outcome, and
// keeps accepted libraries mapped for as long as anything made from them is
// alive. The allow-list is applied from the file name, before the library is
// mapped, so an excluded plugin's code never runs. The files of one scan
// pass the static checks first and are then probed together, so a scan
// starts at most one probe process (plus one per file that crashes or
// hangs it). A registry is used from one thread at a time.
#include "tessera/core/plugin_registry.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
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
#include "plugin_probe.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/options.hpp"
#include "tessera/sdk/error.hpp"
#include "toml_text.hpp"

namespace tessera {
namespace {

// An accepted plugin library. The library handle is the first member, so it
// is released last, after the host context that the plugin may still
// reference while its objects are destroyed.
class LibraryPlugin final : public LoadedPlugin {
 public:
  LibraryPlugin(boost::dll::shared_library library, const tessera_plugin_descriptor* descriptor,
                std::filesystem::path path)
      : library_(std::move(library)),
        descriptor_(descriptor),
        path_(std::move(path)),
        host_(fmt::format("{}.{}", detail::plugin_kind_name(descriptor->kind), descriptor->name)) {}

  [[nodiscard]] const tessera_plugin_descriptor& descriptor() const noexcept override {
    return *descriptor_;
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept override { return path_; }
  [[nodiscard]] const HostContext& host() const noexcept override { return host_; }

 private:
  boost::dll::shared_library library_;
  const tessera_plugin_descriptor* descriptor_;
  std::filesystem::path path_;
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
std::string file_key(const std::filesystem::path& file) {
  return (std::filesystem::path(detail::directory_key(file.parent_path())) / file.filename())
      .string();
}

std::string kind_label(tessera_plugin_kind kind) {
  const char* name = detail::plugin_kind_name(kind);
  return name != nullptr ? std::string(name) : fmt::format("unknown-kind-{}", kind);
}

}  // namespace

struct PluginRegistry::Impl {
  using Key = std::pair<int, std::string>;

  // A file on its way through the checks of one scan.
  struct Candidate {
    std::string key;  // file_key
    PluginRecord record;
    std::string file_kind;  // what the file name claims (empty if nothing)
    std::string file_name;
    std::string reason;     // set once rejected
    bool excluded = false;  // by the allow-list
    bool to_load = false;   // passed the static checks: probe, then load
  };

  std::vector<PluginRecord> records;
  // Kind and name each record's file name claimed (empty if it had none).
  std::vector<std::pair<std::string, std::string>> claims;
  std::map<std::string, std::size_t> file_index;  // file_key -> records index
  std::map<Key, std::shared_ptr<LoadedPlugin>> accepted;
  std::vector<std::filesystem::path> scanned_dirs;
  std::set<std::string> scanned_dir_keys;
  std::vector<std::string> allow;
  std::shared_ptr<spdlog::logger> log = get_logger("core");

  void examine(const std::vector<std::filesystem::path>& files);
  Candidate inspect(const std::filesystem::path& file) const;
  void probe(std::vector<Candidate>& batch);
  void finish(Candidate& candidate);
  std::string load(PluginRecord& record, const std::string& file_kind,
                   const std::string& file_name);
};

// Runs every check on each of `files` not seen before and stores their
// records in order; never throws for a bad file.
void PluginRegistry::Impl::examine(const std::vector<std::filesystem::path>& files) {
  std::vector<Candidate> batch;
  std::set<std::string> keys;
  for (const std::filesystem::path& file : files) {
    const std::string key = file_key(file);
    if (file_index.count(key) != 0 || !keys.insert(key).second) continue;
    batch.push_back(inspect(file));
    batch.back().key = key;
  }
  probe(batch);
  for (Candidate& candidate : batch) finish(candidate);
}

// The checks that run no plugin code: file name, allow-list, ELF structure
// and exports.
PluginRegistry::Impl::Candidate PluginRegistry::Impl::inspect(
    const std::filesystem::path& file) const {
  Candidate c;
  std::error_code ec;
  c.record.path = std::filesystem::absolute(file, ec).lexically_normal();
  if (ec) c.record.path = file;
  if (!parse_plugin_filename(file.filename().string(), c.file_kind, c.file_name)) {
    c.reason = detail::plugin_filename_problem(file.filename().string());
    return c;
  }
  c.record.kind = c.file_kind;
  c.record.name = c.file_name;
  std::error_code dir_ec;
  if (std::filesystem::is_directory(file, dir_ec)) {  // follows symlinks
    c.reason = "is a directory, not a plugin's shared library";
    return c;
  }
  if (plugin_kind_from_name(c.file_kind) < 0) {
    c.reason = fmt::format(
        "file name names unknown plugin kind '{}' (expected backend, strategy, compressor, "
        "selector or model)",
        c.file_kind);
    return c;
  }
  if (!allow.empty() && std::find(allow.begin(), allow.end(), c.file_name) == allow.end()) {
    c.reason = "not in [plugins] allow";
    c.excluded = true;
    return c;
  }
  try {
    const detail::ElfLibraryInfo elf = detail::inspect_elf_library(c.record.path);
    const std::string entry_symbol = TESSERA_PLUGIN_ENTRY_SYMBOL;
    if (elf.exports_known &&
        std::find(elf.exports.begin(), elf.exports.end(), entry_symbol) == elf.exports.end()) {
      c.reason = "does not export " + entry_symbol;
      return c;
    }
  } catch (const detail::ElfFormatError& e) {
    c.reason = fmt::format("not a valid shared library: {}", e.what());
    return c;
  } catch (const std::exception& e) {
    c.reason = fmt::format("unexpected error while loading: {}", e.what());
    return c;
  }
  c.to_load = true;
  return c;
}

// Loads every file that passed the static checks in a probe process first
// (or takes the cached outcome); one that crashes or hangs there is rejected.
void PluginRegistry::Impl::probe(std::vector<Candidate>& batch) {
  std::vector<std::filesystem::path> files;
  std::vector<Candidate*> probed;
  for (Candidate& c : batch) {
    if (!c.to_load) continue;
    files.push_back(c.record.path);
    probed.push_back(&c);
  }
  if (files.empty()) return;
  try {
    const detail::ProbeSettings settings = detail::ProbeSettings::from_environment(*log);
    const std::vector<detail::ProbeResult> results = detail::probe_libraries(files, settings, *log);
    for (std::size_t i = 0; i < probed.size(); ++i) {
      std::string reason = detail::probe_rejection(results[i], settings);
      if (reason.empty()) continue;
      probed[i]->reason = std::move(reason);
      probed[i]->to_load = false;
    }
  } catch (const std::exception& e) {
    // Out of memory or the like: better no probe than no plugins.
    log->warn("plugin probe failed ({}); loading without it", e.what());
  }
}

// Loads a candidate that got this far and records the outcome.
void PluginRegistry::Impl::finish(Candidate& c) {
  if (c.to_load) {
    try {
      c.reason = load(c.record, c.file_kind, c.file_name);
    } catch (const std::exception& e) {
      c.reason = fmt::format("unexpected error while loading: {}", e.what());
    }
  }
  PluginRecord& record = c.record;
  record.loaded = c.reason.empty();
  record.reason = c.reason;
  if (!record.loaded) {
    // An allow-list exclusion is the user's choice, not a fault of the file.
    log->log(c.excluded ? spdlog::level::info : spdlog::level::warn, "plugin {} rejected: {}",
             record.path.string(), record.reason);
  }
  file_index.emplace(c.key, records.size());
  claims.emplace_back(c.file_kind, c.file_name);
  records.push_back(std::move(record));
}

// Loads and checks the library at record.path, which passed the static
// checks; on success adds it to `accepted`. Returns the rejection reason,
// empty when accepted.
std::string PluginRegistry::Impl::load(PluginRecord& record, const std::string& file_kind,
                                       const std::string& file_name) {
  const std::filesystem::path& path = record.path;
  const std::string entry_symbol = TESSERA_PLUGIN_ENTRY_SYMBOL;
  std::string no_entry = "does not export " + entry_symbol;

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

namespace {

// find_strategy (host ABI 1.6) over `registry`: the plugin, and its options
// resolved from "key = value; ..." and kept for the life of the process
// (the caller holds the pointers as long as it likes).
FoundStrategy find_strategy_plugin(const PluginRegistry& registry, const std::string& name,
                                   const std::string& options) {
  struct Resolved {
    std::shared_ptr<LoadedPlugin> plugin;  // keeps the library loaded
    tessera_options options;
  };
  static std::mutex mu;
  static std::deque<Resolved> kept;
  const std::lock_guard lock(mu);  // rank threads ask at once
  std::shared_ptr<LoadedPlugin> plugin = registry.get(TESSERA_KIND_STRATEGY, name);
  const tessera_plugin_descriptor& d = plugin->descriptor();
  TESSERA_CHECK(d.api != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "strategy '", name, "' (",
                plugin->path().string(), ") has no api table");
  std::vector<std::string> assignments;
  std::string_view rest = options;
  while (!rest.empty()) {
    const std::size_t end = std::min(rest.find(';'), rest.size());
    const std::string_view part = detail::trim(rest.substr(0, end));
    if (!part.empty()) assignments.emplace_back(part);
    rest.remove_prefix(std::min(end + 1, rest.size()));
  }
  const toml::table table = parse_option_overrides(assignments);
  tessera_options resolved =
      resolve_options(std::span<const tessera_option_decl>(d.options, d.num_options), &table,
                      "the options of strategy '" + name + "'");
  const InterfaceVersion v = interface_version(d);
  Resolved& r = kept.emplace_back(Resolved{plugin, std::move(resolved)});
  FoundStrategy found;
  found.api = static_cast<const tessera_strategy_api*>(d.api);
  found.host = plugin->host().api();
  found.options = &r.options;
  found.version = (static_cast<uint32_t>(v.major) << 16U) | static_cast<uint32_t>(v.minor);
  return found;
}

}  // namespace

PluginRegistry::PluginRegistry() : impl_(std::make_unique<Impl>()) {
  set_strategy_finder(this, [this](const std::string& name, const std::string& options) {
    return find_strategy_plugin(*this, name, options);
  });
}

PluginRegistry::~PluginRegistry() { clear_strategy_finder(this); }

void PluginRegistry::scan(const std::vector<std::filesystem::path>& dirs) {
  std::vector<std::filesystem::path> files;
  for (const std::filesystem::path& dir : dirs) {
    if (dir.empty() || !impl_->scanned_dir_keys.insert(detail::directory_key(dir)).second) {
      continue;
    }
    impl_->scanned_dirs.push_back(dir);
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec)) {
      impl_->log->debug("plugin directory {} does not exist", dir.string());
      continue;
    }
    if (!std::filesystem::is_directory(dir, ec)) {
      impl_->log->warn("plugin directory {} is not a directory; skipped", dir.string());
      continue;
    }
    std::vector<std::filesystem::path> candidates;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      // Rejected with its reason if it is not a plugin after all (a name
      // of other characters, a directory).
      if (detail::meant_as_plugin(it->path().filename().string())) {
        candidates.push_back(it->path());
      }
    }
    if (ec) {
      impl_->log->warn("cannot list plugin directory {}: {}", dir.string(), ec.message());
    }
    std::sort(candidates.begin(), candidates.end());
    files.insert(files.end(), candidates.begin(), candidates.end());
  }
  impl_->examine(files);
}

const PluginRecord& PluginRegistry::load_file(const std::filesystem::path& file) {
  impl_->examine({file});
  return impl_->records[impl_->file_index.at(file_key(file))];
}

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
    for (const std::filesystem::path& d : impl_->scanned_dirs) dirs.push_back(d.string());
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

// `tessera plugins --describe NAME [--kind KIND]`.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugins_command.hpp"
#include "table.hpp"
#include "tessera/c/backend.h"
#include "tessera/core/options.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {

namespace {

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

// "backend/inmemory, strategy/ddp" for every loaded plugin.
std::string available_plugins(const PluginRegistry& registry) {
  std::vector<std::string> all;
  for (int k = 0; k < TESSERA_KIND_COUNT; ++k) {
    const auto kind = static_cast<tessera_plugin_kind>(k);
    for (const auto& n : registry.names(kind))
      all.push_back(std::string(kind_name(kind)) + "/" + n);
  }
  return all.empty() ? "none" : join(all, ", ");
}

// The single loaded plugin called `name` (of `kind` if given), or throws.
std::shared_ptr<LoadedPlugin> find_plugin(const PluginRegistry& registry, const std::string& name,
                                          const std::string& kind) {
  if (!kind.empty()) {
    return registry.get(static_cast<tessera_plugin_kind>(plugin_kind_from_name(kind)), name);
  }
  std::vector<std::shared_ptr<LoadedPlugin>> found;
  for (int k = 0; k < TESSERA_KIND_COUNT; ++k) {
    if (auto p = registry.find(static_cast<tessera_plugin_kind>(k), name)) found.push_back(p);
  }
  if (found.size() == 1) return found.front();
  if (found.size() > 1) {
    std::vector<std::string> kinds;
    kinds.reserve(found.size());
    for (const auto& p : found) kinds.emplace_back(kind_name(p->kind()));
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, "plugin name '" + name +
                                                  "' is used by several kinds (" +
                                                  join(kinds, ", ") + "); add --kind");
  }
  std::string message = "no loaded plugin named '" + name + "'";
  for (const auto& r : registry.records()) {
    if (!r.loaded && r.name == name) {
      message += "; rejected " + r.path.string() + ": " + r.reason;
    }
  }
  message += "; available plugins: " + available_plugins(registry);
  throw Error(TESSERA_ERR_INVALID_ARGUMENT, message);
}

std::vector<std::string> capability_names(const tessera_plugin_descriptor& d) {
  const uint32_t bits = backend_capabilities(d);
  std::vector<std::string> caps;
  if ((bits & TESSERA_BACKEND_CAP_THREAD_RANKS) != 0) caps.emplace_back("thread ranks");
  if ((bits & TESSERA_BACKEND_CAP_CPU_BUFFERS) != 0) caps.emplace_back("cpu buffers");
  if ((bits & TESSERA_BACKEND_CAP_CUDA_BUFFERS) != 0) caps.emplace_back("cuda buffers");
  return caps;
}

const char* text_or_empty(const char* s) { return s == nullptr ? "" : s; }

std::span<const tessera_option_decl> options_of(const tessera_plugin_descriptor& d) {
  if (d.options == nullptr) return {};
  return {d.options, d.num_options};
}

void print_json(const LoadedPlugin& plugin, std::ostream& out) {
  const auto& d = plugin.descriptor();
  nlohmann::json doc;
  doc["name"] = text_or_empty(d.name);
  doc["kind"] = std::string(kind_name(d.kind));
  doc["version"] = text_or_empty(d.version);
  doc["abi"] = std::to_string(d.abi_major) + "." + std::to_string(d.abi_minor);
  const InterfaceVersion api = interface_version(d);
  doc["api"] = std::to_string(api.major) + "." + std::to_string(api.minor);
  doc["file"] = plugin.path().string();
  doc["summary"] = text_or_empty(d.summary);
  if (d.kind == TESSERA_KIND_BACKEND) doc["capabilities"] = capability_names(d);
  doc["options"] = nlohmann::json::array();
  for (const auto& o : options_of(d)) {
    doc["options"].push_back({{"key", text_or_empty(o.key)},
                              {"type", option_type_name(o.type)},
                              {"default", text_or_empty(o.default_value)},
                              {"help", text_or_empty(o.help)}});
  }
  out << doc.dump(2) << '\n';
}

void print_text(const LoadedPlugin& plugin, std::ostream& out) {
  const auto& d = plugin.descriptor();
  out << "name:     " << text_or_empty(d.name) << '\n'
      << "kind:     " << kind_name(d.kind) << '\n'
      << "version:  " << text_or_empty(d.version) << '\n'
      << "API:      " << kind_name(d.kind) << ' ' << interface_version(d).major << '.'
      << interface_version(d).minor << '\n'
      << "ABI:      " << d.abi_major << '.' << d.abi_minor << '\n'
      << "file:     " << plugin.path().string() << '\n'
      << "summary:  " << text_or_empty(d.summary) << '\n';
  if (d.kind == TESSERA_KIND_BACKEND) {
    const auto caps = capability_names(d);
    out << "capabilities: " << (caps.empty() ? "none" : join(caps, ", ")) << '\n';
  }
  const auto options = options_of(d);
  if (options.empty()) {
    out << "options:  none\n";
    return;
  }
  out << "options:\n";
  TextTable table({{"  key"}, {"type"}, {"default"}, {"help"}});
  for (const auto& o : options) {
    table.add_row({"  " + std::string(text_or_empty(o.key)), option_type_name(o.type),
                   text_or_empty(o.default_value), text_or_empty(o.help)});
  }
  table.print(out);
}

}  // namespace

uint32_t backend_capabilities(const tessera_plugin_descriptor& descriptor) noexcept {
  if (descriptor.kind != TESSERA_KIND_BACKEND) return 0;
  const auto* api = static_cast<const tessera_backend_api*>(descriptor.api);
  if (api == nullptr ||
      api->struct_size < offsetof(tessera_backend_api, capabilities) + sizeof(api->capabilities)) {
    return 0;
  }
  return api->capabilities;
}

void print_plugin_description(const PluginRegistry& registry, const std::string& name,
                              const std::string& kind, bool json, std::ostream& out) {
  const auto plugin = find_plugin(registry, name, kind);
  if (json) {
    print_json(*plugin, out);
  } else {
    print_text(*plugin, out);
  }
}

}  // namespace tessera::cli

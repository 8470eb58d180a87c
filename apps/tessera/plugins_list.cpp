// `tessera plugins` listing and the subcommand's registration.
#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_error.hpp"
#include "display_path.hpp"
#include "plugins_command.hpp"
#include "table.hpp"

namespace tessera::cli {

CLI::App* add_plugins_command(CLI::App& app, PluginsArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "plugins", "List the plugins found on the search path (loaded and rejected)");
  cmd->add_flag("--json", args.json, "Print JSON instead of a table");
  cmd->add_option("--describe", args.describe,
                  "Show one plugin: version, ABI, file, summary and its declared options")
      ->type_name("NAME");
  cmd->add_option("--kind", args.kind,
                  "With --describe: backend, strategy, compressor, selector or model")
      ->type_name("KIND");
  return cmd;
}

int run_plugins_command(const GlobalOptions& global, const PluginsArgs& args, std::ostream& out) {
  if (!args.kind.empty()) {
    if (args.describe.empty()) throw UsageError("--kind is only used together with --describe");
    if (plugin_kind_from_name(args.kind) < 0) {
      throw UsageError("unknown plugin kind '" + args.kind +
                       "' for --kind (use backend, strategy, compressor, selector or model)");
    }
  }
  // The listing shows every rejection with its reason; the loader's warnings
  // about the same files would only repeat it on stderr.
  const Session session = open_session(global, "error");
  if (args.describe.empty()) {
    print_plugin_list(session, args.json, out);
  } else {
    print_plugin_description(*session.registry, args.describe, args.kind, args.json, out);
  }
  return kExitOk;
}

namespace {

std::string abi_text(const PluginRecord& r) {
  if (r.abi_major < 0) return "-";
  return std::to_string(r.abi_major) + "." + std::to_string(r.abi_minor);
}

// Version of the plugin's interface table (of its kind), "-" if unread.
std::string api_text(const PluginRecord& r) {
  if (r.api_major < 0) return "-";
  return std::to_string(r.api_major) + "." + std::to_string(r.api_minor);
}

std::vector<const PluginRecord*> sorted_records(const PluginRegistry& registry) {
  std::vector<const PluginRecord*> out;
  for (const auto& r : registry.records()) out.push_back(&r);
  std::stable_sort(out.begin(), out.end(), [](const PluginRecord* a, const PluginRecord* b) {
    if (a->kind != b->kind) return a->kind < b->kind;
    if (a->name != b->name) return a->name < b->name;
    return a->path < b->path;
  });
  return out;
}

void print_json(const Session& session, std::ostream& out) {
  nlohmann::json doc;
  doc["search_path"] = nlohmann::json::array();
  for (const auto& dir : session.search_path) doc["search_path"].push_back(display_path(dir));
  doc["plugins"] = nlohmann::json::array();
  for (const PluginRecord* r : sorted_records(*session.registry)) {
    nlohmann::json p;
    p["kind"] = r->kind;
    p["name"] = r->name;
    p["version"] = r->version;
    p["abi"] = r->abi_major < 0 ? nlohmann::json(nullptr) : nlohmann::json(abi_text(*r));
    p["api"] = r->api_major < 0 ? nlohmann::json(nullptr) : nlohmann::json(api_text(*r));
    p["status"] = r->loaded ? "loaded" : "rejected";
    p["file"] = r->path.string();
    p["reason"] = r->reason;
    p["summary"] = r->summary;
    doc["plugins"].push_back(std::move(p));
  }
  out << doc.dump(2) << '\n';
}

}  // namespace

void print_plugin_list(const Session& session, bool json, std::ostream& out) {
  if (json) {
    print_json(session, out);
    return;
  }
  const auto records = sorted_records(*session.registry);
  const bool any_rejected =
      std::any_of(records.begin(), records.end(), [](const PluginRecord* r) { return !r->loaded; });
  std::vector<Column> columns{{"kind"}, {"name"},   {"version"}, {"API"},
                              {"ABI"},  {"status"}, {"file"}};
  if (any_rejected) columns.push_back({"reason"});
  TextTable table(std::move(columns));
  for (const PluginRecord* r : records) {
    std::vector<std::string> row{r->kind.empty() ? "-" : r->kind,
                                 r->name.empty() ? "-" : r->name,
                                 r->version.empty() ? "-" : r->version,
                                 api_text(*r),
                                 abi_text(*r),
                                 r->loaded ? "loaded" : "rejected",
                                 r->path.string()};
    if (any_rejected) row.push_back(r->loaded ? "" : r->reason);
    table.add_row(std::move(row));
  }
  if (table.num_rows() == 0) {
    out << "no plugins found\n";
  } else {
    table.print(out);
  }
  out << "\nsearch path:\n";
  for (const auto& dir : session.search_path) {
    std::error_code ec;
    out << "  " << display_path(dir)
        << (std::filesystem::exists(dir, ec) ? "" : " (does not exist)") << '\n';
  }
}

}  // namespace tessera::cli

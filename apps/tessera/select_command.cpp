#include "select_command.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_error.hpp"
#include "table.hpp"
#include "tessera/core/byte_size.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/core/rank_threads.hpp"

namespace tessera::cli {
namespace {

std::string select_mib(int64_t bytes) {
  return fmt::format("{:.1f}", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

int64_t sent_bytes(const tessera_estimate& e) {
  int64_t sum = 0;
  for (int32_t a = 0; a < std::min(e.num_axes, TESSERA_ESTIMATE_MAX_AXES); ++a) {
    sum += e.axes[a].bytes;
  }
  return sum;
}

std::string millis(double seconds) {
  return seconds < 0 ? std::string("-") : fmt::format("{:.2f}", seconds * 1e3);
}

// Whether the backend named in `config` runs its ranks as threads.
bool thread_backend(const PluginRegistry& registry, const Config& config) {
  const auto plugin = registry.get(TESSERA_KIND_BACKEND, config.backend.name);
  const auto* api = static_cast<const tessera_backend_api*>(plugin->descriptor().api);
  return api != nullptr &&
         api->struct_size >= offsetof(tessera_backend_api, capabilities) + sizeof(uint32_t) &&
         (api->capabilities & TESSERA_BACKEND_CAP_THREAD_RANKS) != 0;
}

}  // namespace

CLI::App* add_select_command(CLI::App& app, SelectArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "select",
      "Rank the strategies for a run configuration's model and batch by predicted memory and "
      "step time, and show the one strategy \"auto\" would choose; trains nothing");
  cmd->add_option("CONFIG", args.config, "Run configuration (TOML); see docs/config.md")
      ->type_name("FILE")
      ->required();
  add_set_option(
      cmd, args.overrides,
      "Override one key of the configuration (repeatable), e.g. --set data.batch_size=64");
  cmd->add_option("--world", args.world, "Ranks to select for (default: run.world_size)")
      ->type_name("N")
      ->each([&args](const std::string&) { args.world_given = true; });
  cmd->add_option("--ranks-per-node", args.ranks_per_node,
                  "Ranks that share a node (default: all of them)")
      ->type_name("K")
      ->each([&args](const std::string&) { args.ranks_per_node_given = true; });
  cmd->add_option("--memory-per-rank", args.memory_per_rank,
                  "Memory budget per rank, e.g. 2GiB (default: run.memory_per_rank, else detected)")
      ->type_name("SIZE");
  cmd->add_option("--selector", args.selector,
                  "Selector plugin (default: strategy.options.selector, else auto)");
  cmd->add_flag("--json", args.json, "Print the ranking as one JSON object");
  return cmd;
}

void print_selection_table(const train::Selection& s, std::ostream& out) {
  out << fmt::format("# selector '{}' on {} ranks ({} per node); budget {} per rank ({})\n",
                     s.selector, s.world_size, s.ranks_per_node, format_memory(s.budget.bytes),
                     s.budget.source);
  if (s.backend) out << "# backend " << s.backend->name << ": " << s.backend->source << '\n';
  if (s.compute_rate) out << "# compute: " << s.compute_rate->source << '\n';
  out << "# memory: predicted peak MiB per rank by category; total: peak of their sum; sent: MiB "
         "per rank and step; step: predicted (measured) ms\n";
  TextTable table({{""},
                   {"candidate"},
                   {"params", Align::kRight},
                   {"grads", Align::kRight},
                   {"optim", Align::kRight},
                   {"activ", Align::kRight},
                   {"comm", Align::kRight},
                   {"total", Align::kRight},
                   {"sent", Align::kRight},
                   {"step", Align::kRight},
                   {"measured", Align::kRight},
                   {"fits"},
                   {"reason"}});
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    const train::SelectionRow& r = s.rows[i];
    const bool est = r.has(TESSERA_ROW_ESTIMATED);
    const auto cat = [&](int c) {
      return est ? select_mib(r.estimate.memory[c]) : std::string("-");
    };
    table.add_row({i == s.chosen ? "*" : "", r.label(), cat(TESSERA_MEM_PARAMS),
                   cat(TESSERA_MEM_GRADS), cat(TESSERA_MEM_OPTIMIZER), cat(TESSERA_MEM_ACTIVATIONS),
                   cat(TESSERA_MEM_COMM), est ? select_mib(r.estimate.memory_total) : "-",
                   est ? select_mib(sent_bytes(r.estimate)) : "-", millis(r.step_seconds),
                   millis(r.measured_seconds), r.has(TESSERA_ROW_FITS) ? "yes" : "no", r.reason});
  }
  table.print(out);
  out << "chosen: " << s.choice().label() << '\n';
}

void print_selection_json(const train::Selection& s, std::ostream& out) {
  nlohmann::ordered_json j;
  j["selector"] = s.selector;
  j["world_size"] = s.world_size;
  j["ranks_per_node"] = s.ranks_per_node;
  j["budget_bytes"] = s.budget.bytes;
  j["budget_source"] = s.budget.source;
  if (s.backend) {
    j["backend"] = {{"name", s.backend->name},
                    {"probed", s.backend->probed},
                    {"bandwidth", s.backend->bandwidth},
                    {"latency", s.backend->latency},
                    {"source", s.backend->source}};
  }
  if (s.compute_rate) {
    j["compute"] = {{"flops_per_second", s.compute_rate->flops_per_second},
                    {"source", s.compute_rate->source}};
  }
  j["chosen"] = s.chosen;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    const train::SelectionRow& r = s.rows[i];
    nlohmann::ordered_json row;
    row["strategy"] = r.strategy;
    row["options"] = r.options;
    row["chosen"] = i == s.chosen;
    row["fits"] = r.has(TESSERA_ROW_FITS);
    if (r.has(TESSERA_ROW_ESTIMATED)) {
      const tessera_estimate& e = r.estimate;
      nlohmann::ordered_json memory;
      for (int c = 0; c < TESSERA_MEM_CATEGORY_COUNT; ++c) {
        memory[MemoryTracker::category_name(c)] = e.memory[c];
      }
      memory["total"] = e.memory_total;
      row["memory"] = memory;
      row["data_size"] = e.data_size;
      nlohmann::ordered_json axes = nlohmann::ordered_json::array();
      for (int32_t a = 0; a < std::min(e.num_axes, TESSERA_ESTIMATE_MAX_AXES); ++a) {
        axes.push_back({{"name", e.axes[a].name != nullptr ? e.axes[a].name : ""},
                        {"group_size", e.axes[a].group_size},
                        {"bytes", e.axes[a].bytes},
                        {"messages", e.axes[a].messages}});
      }
      row["axes"] = axes;
      row["bytes_per_step"] = sent_bytes(e);
      row["compute_flops"] = e.compute_flops;
      row["bubble"] = e.bubble;
    }
    row["step_seconds"] = r.step_seconds;
    row["compute_seconds"] = r.compute_seconds;
    row["comm_seconds"] = r.comm_seconds;
    row["bubble_seconds"] = r.bubble_seconds;
    if (r.has(TESSERA_ROW_MEASURED)) row["measured_seconds"] = r.measured_seconds;
    row["reason"] = r.reason;
    rows.push_back(row);
  }
  j["candidates"] = rows;
  out << j.dump(2) << '\n';
}

int run_select_command(const GlobalOptions& global, const SelectArgs& args, std::ostream& out) {
  refuse_global_config(global, "tessera select");
  for (const auto& [flag, given, value] :
       {std::tuple{"--world", args.world_given, args.world},
        std::tuple{"--ranks-per-node", args.ranks_per_node_given, args.ranks_per_node}}) {
    if (given && value < 1) {
      throw UsageError(fmt::format("{} must be at least 1, got {}", flag, value));
    }
  }
  Config config = load_config(args.config, args.overrides);
  if (!args.memory_per_rank.empty()) {
    const std::optional<int64_t> bytes = parse_memory_size(args.memory_per_rank);
    if (!bytes) {
      throw UsageError("--memory-per-rank '" + args.memory_per_rank + "': must be " +
                       memory_size_hint());
    }
    config.run.memory_per_rank = *bytes;
  }
  if (args.world_given) config.run.world_size = args.world;
  const Session session = open_session(global, config);
  const PluginRegistry& registry = *session.registry;

  const std::unique_ptr<model::Model> model = model::make_model(config.model, registry);
  const train::ModelDescription desc(*model, train::batch_spec(config));
  const std::unique_ptr<Optimizer> optimizer = make_optimizer(config.optimizer);
  const int world = config.run.world_size;
  const bool threads = thread_backend(registry, config);
  // The probes run the world as threads of this process: refuse one it
  // cannot start before any thread does, as train and bench do.
  if (threads) {
    const std::string excess =
        rank_thread_excess(world,
                           args.world_given ? fmt::format("--world {}", world)
                                            : fmt::format("run.world_size = {}", world),
                           config.backend.name);
    if (!excess.empty() && args.world_given) throw UsageError(excess);
    if (!excess.empty()) throw Error(TESSERA_ERR_INVALID_ARGUMENT, excess);
  }

  train::SelectRequest request;
  train::selector_from_config(config, request);
  if (!args.selector.empty()) request.selector = args.selector;
  request.registry = &registry;
  request.model = &desc;
  request.world_size = world;
  request.ranks_per_node = args.ranks_per_node_given ? std::min(args.ranks_per_node, world) : world;
  request.budget = train::memory_budget(config, request.ranks_per_node);
  if (!args.memory_per_rank.empty()) request.budget.source = "--memory-per-rank";
  request.compute_rate = train::model_rate_probe(*model, desc, *optimizer, world);
  if (threads) {
    request.backend = [&] { return train::probe_thread_backend(config, registry, world); };
    request.trial = train::thread_trial_runner(config, registry);
  } else {
    request.backend = [&] {
      return train::assumed_backend(config.backend.name, false,
                                    "process ranks are not probed by tessera select");
    };
    request.no_trial_reason = train::no_trials_reason(config.backend.name);
  }
  const train::Selection selection = train::run_selector(request);
  if (args.json) {
    print_selection_json(selection, out);
  } else {
    print_selection_table(selection, out);
  }
  return kExitOk;
}

}  // namespace tessera::cli

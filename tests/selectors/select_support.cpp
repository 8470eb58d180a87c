// Test harness of the selector tests (select_support.hpp).
#include "select_support.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>

#include <toml++/toml.h>

#include "tessera/core/host_api.hpp"
#include "tessera/core/options.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

struct EnvContext {
  const SelectSetup* setup = nullptr;
  SelectResult* result = nullptr;
};

tessera_status env_estimate(void* ctx, const char* strategy, const char* options,
                            tessera_estimate* out) {
  auto* c = static_cast<EnvContext*>(ctx);
  c->result->estimated.push_back(std::string(strategy) + "|" + options);
  std::string why;
  const uint32_t size = out->struct_size;
  const tessera_status s = c->setup->estimate(strategy, options, out, &why);
  out->struct_size = size;
  if (s != TESSERA_OK) set_host_call_error(why);
  return s;
}

tessera_status env_backend(void* ctx, tessera_backend_props* out) {
  const auto* c = static_cast<EnvContext*>(ctx);
  const uint32_t size = out->struct_size;
  std::memcpy(out, &c->setup->props, std::min<size_t>(size, sizeof *out));
  out->struct_size = size;
  return TESSERA_OK;
}

tessera_status env_trial(void* ctx, const char* strategy, const char* options, int64_t steps,
                         double* seconds, int64_t* peak) {
  const auto* c = static_cast<EnvContext*>(ctx);
  std::string why = "ranks are processes";
  tessera_status s = TESSERA_ERR_UNSUPPORTED;
  if (c->setup->trial) s = c->setup->trial(strategy, options, steps, seconds, peak, &why);
  if (s != TESSERA_OK) set_host_call_error(why);
  return s;
}

void env_report(void* ctx, const tessera_selection_row* r) {
  auto* c = static_cast<EnvContext*>(ctx);
  Row row;
  row.strategy = r->strategy;
  row.options = r->options;
  row.flags = r->flags;
  row.estimate = r->estimate;
  row.step_seconds = r->step_seconds;
  row.compute_seconds = r->compute_seconds;
  row.comm_seconds = r->comm_seconds;
  row.bubble_seconds = r->bubble_seconds;
  row.measured_seconds = r->measured_seconds;
  row.reason = r->reason != nullptr ? r->reason : "";
  c->result->rows.push_back(std::move(row));
}

}  // namespace

const PluginRegistry& registry() {
  static PluginRegistry* reg = [] {
    auto* r = new PluginRegistry();
    r->scan({TESSERA_SELECTORS_PLUGIN_DIR});
    return r;
  }();
  return *reg;
}

const Row& SelectResult::chosen() const {
  for (const Row& r : rows) {
    if (r.chosen()) return r;
  }
  throw std::runtime_error("no row is chosen");
}

const Row& SelectResult::find(const std::string& strategy, const std::string& options) const {
  for (const Row& r : rows) {
    if (r.strategy == strategy && r.options == options) return r;
  }
  throw std::runtime_error("no row for " + strategy + " (" + options + ")");
}

bool SelectResult::has(const std::string& strategy, const std::string& options) const {
  return std::any_of(rows.begin(), rows.end(),
                     [&](const Row& r) { return r.strategy == strategy && r.options == options; });
}

tessera_backend_props cpu_props() {
  tessera_backend_props p{};
  p.struct_size = sizeof p;
  p.device = TESSERA_DEVICE_CPU;
  p.name = "inmemory";
  p.thread_ranks = 1;
  p.probed = 0;
  p.bandwidth = 1e9;
  p.latency = 1e-5;
  p.source = "assumed for the test";
  return p;
}

SelectResult run_select(const SelectSetup& setup, const std::string& options_toml,
                        const std::string& selector) {
  const auto plugin = registry().get(TESSERA_KIND_SELECTOR, selector);
  const tessera_plugin_descriptor& d = plugin->descriptor();
  const auto* api = static_cast<const tessera_selector_api*>(d.api);
  const toml::table table = toml::parse(options_toml);
  const OptionValues opts =
      resolve_options(std::span(d.options, d.num_options), &table, "test [strategy.options]");

  std::vector<std::string> names = setup.strategies;
  if (names.empty()) names = registry().names(TESSERA_KIND_STRATEGY);
  std::vector<std::shared_ptr<LoadedPlugin>> plugins;
  std::vector<tessera_strategy_info> infos;
  for (const std::string& n : names) {
    plugins.push_back(registry().get(TESSERA_KIND_STRATEGY, n));
    const tessera_plugin_descriptor& sd = plugins.back()->descriptor();
    tessera_strategy_info info{};
    info.name = sd.name;
    info.summary = sd.summary;
    info.options = sd.options;
    info.num_options = sd.num_options;
    info.can_estimate =
        std::count(setup.without_estimate.begin(), setup.without_estimate.end(), n) == 0 ? 1 : 0;
    infos.push_back(info);
  }

  SelectResult result;
  EnvContext ctx{&setup, &result};
  tessera_select_env env{};
  env.struct_size = sizeof env;
  env.world_size = setup.world;
  env.ranks_per_node = setup.ranks_per_node;
  env.num_strategies = static_cast<int32_t>(infos.size());
  env.memory_budget = setup.budget;
  env.budget_source = setup.budget_source.c_str();
  env.model = &setup.model->c();
  env.strategies = infos.data();
  env.ctx = &ctx;
  env.estimate = &env_estimate;
  env.backend = &env_backend;
  env.trial = &env_trial;
  env.report = &env_report;
  (void)take_thread_error();
  result.status = api->select(plugin->host().api(), &opts, &env);
  if (result.status != TESSERA_OK) result.error = take_thread_error();
  return result;
}

train::ModelDescription transformer(const std::string& name, int64_t layers, int64_t d,
                                    int64_t heads, int64_t vocab, int64_t seq,
                                    const train::BatchSpec& batch) {
  const double s = static_cast<double>(seq);
  const double w = static_cast<double>(d);
  const uint32_t tp = TESSERA_UNIT_TENSOR_PARALLEL | TESSERA_UNIT_SEQUENCE_PARALLEL;
  std::vector<train::UnitSpec> units;
  train::UnitSpec embed;
  embed.name = "embed";
  embed.flags = tp;
  embed.params = vocab * d + seq * d;
  embed.num_tensors = 2;
  embed.forward_flops = s * w;
  embed.backward_flops = s * w;
  embed.activation_bytes = 4 * s * w;
  embed.output_bytes = 4 * s * w;
  embed.sequence_activation_bytes = 4 * s * w;
  units.push_back(embed);
  for (int64_t l = 0; l < layers; ++l) {
    train::UnitSpec b;
    b.name = "block" + std::to_string(l);
    b.flags = tp;
    b.params = 12 * d * d + 13 * d;
    b.split_params = 12 * d * d + 9 * d;
    b.num_tensors = 12;
    // Projections 2·12·d² per token, attention scores and mixing 2·2·s·d.
    b.forward_flops = 24 * w * w * s + 4 * s * s * w;
    b.backward_flops = 2 * b.forward_flops;
    // Saved activations per token (16-bit count of Korthikanti et al.
    // 2022: 34·d + 5·heads·s), doubled for f32: 10·d whole, 24·d +
    // 5·heads·s split by the tensor group, the 10·d sequence-split in
    // sequence mode.
    const double h = static_cast<double>(heads);
    b.activation_bytes = 2 * s * (34 * w + 5 * h * s);
    b.split_activation_bytes = 2 * s * (24 * w + 5 * h * s);
    b.sequence_activation_bytes = 2 * s * 10 * w;
    b.output_bytes = 4 * s * w;
    units.push_back(b);
  }
  train::UnitSpec head;
  head.name = "head";
  head.flags = tp;
  head.params = 2 * d;
  head.tied_params = vocab * d;
  head.tied_unit = 0;  // the embedding
  head.num_tensors = 2;
  head.forward_flops = 2 * s * w * static_cast<double>(vocab);
  head.backward_flops = 2 * head.forward_flops;
  head.activation_bytes = 4 * s * (w + static_cast<double>(vocab));
  head.split_activation_bytes = 4 * s * static_cast<double>(vocab);
  units.push_back(head);
  return {name, std::move(units), seq, batch};
}

tessera_estimate make_estimate(int64_t total, double flops, int64_t bytes, int32_t group,
                               double bubble) {
  tessera_estimate e{};
  e.struct_size = sizeof e;
  e.data_size = group;
  e.memory[TESSERA_MEM_PARAMS] = total;
  e.memory_total = total;
  e.compute_flops = flops;
  e.bubble = bubble;
  if (group > 1) {
    e.num_axes = 1;
    e.axes[0].name = "data";
    e.axes[0].group_size = group;
    e.axes[0].bytes = bytes;
    e.axes[0].messages = 1;
  }
  return e;
}

}  // namespace tessera::test

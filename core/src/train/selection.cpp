// Strategy selection (selection.hpp).
#include "tessera/core/train/selection.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "../toml_text.hpp"
#include "host_call.hpp"
#include "tessera/core/byte_size.hpp"
#include "tessera/core/data/batch.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/core/optim/optimizer.hpp"
#include "tessera/core/rank_threads.hpp"
#include "tessera/core/train/compressor_host.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "tessera/core/train/trainer.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace {

// The first number in `file`, or 0 when it is missing, unreadable or says
// "max" (no limit).
int64_t number_in(const char* file) {
  std::ifstream in(file);
  std::string word;
  if (!(in >> word) || word == "max") return 0;
  try {
    return std::stoll(word);
  } catch (const std::exception&) {
    return 0;
  }
}

// MemAvailable of /proc/meminfo in bytes, 0 if unknown.
int64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// The cgroup memory limit of this process in bytes, 0 if none. v1 reports
// "no limit" as a huge number; anything above 2^60 counts as none.
int64_t cgroup_limit() {
  int64_t limit = number_in("/sys/fs/cgroup/memory.max");
  if (limit == 0) limit = number_in("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  return limit > 0 && limit < (int64_t{1} << 60) ? limit : 0;
}

std::string ranks_text(int n) { return fmt::format("{} local rank{}", n, n == 1 ? "" : "s"); }

// Seconds per call of `body`, the best of `rounds` timed rounds of `reps`
// calls each (the best round is the least disturbed by other work).
template <typename Body>
double best_seconds(int rounds, int reps, Body&& body) {
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) body();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / reps);
  }
  return best;
}

// The C environment a selector sees, and what it reports back.
struct SelectCall {
  const SelectRequest* request = nullptr;
  std::vector<SelectionRow> rows;
  std::optional<BackendProps> backend;
  std::optional<ModelRate> rate;
  std::string rate_error;                  // why there is no rate, once asked
  std::vector<std::string> props_strings;  // keeps props' strings alive
  int32_t compression = 0;                 // tessera_estimate_args.compression
};

SelectCall& call_of(void* ctx) { return *static_cast<SelectCall*>(ctx); }

// Runs `body`, turning what it throws into a status and the host-call error
// the selector reads through last_error (the message alone, with no prefix).
template <typename Body>
tessera_status host_side(Body&& body) noexcept {
  clear_host_call_error();
  return detail::guard_host_call([] { return std::string(); }, std::forward<Body>(body));
}

tessera_status c_estimate(void* ctx, const char* strategy, const char* options,
                          tessera_estimate* out) noexcept {
  return host_side([&] {
    const SelectRequest& req = *call_of(ctx).request;
    TESSERA_CHECK(strategy != nullptr && out != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                  "estimate: null argument");
    const std::string where = fmt::format("candidate {} options", strategy);
    const toml::table table = candidate_options(options != nullptr ? options : "", where);
    const StrategyPlugin plugin(*req.registry, strategy, &table, where);
    const tessera_estimate e = estimate_fed(plugin, *req.model, req.world_size, req.ranks_per_node,
                                            call_of(ctx).compression);
    const uint32_t size = out->struct_size;
    std::memcpy(out, &e, std::min<size_t>(size, sizeof e));
    out->struct_size = size;
  });
}

tessera_status c_backend(void* ctx, tessera_backend_props* out) noexcept {
  return host_side([&] {
    SelectCall& call = call_of(ctx);
    TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "backend: null argument");
    if (!call.backend) call.backend = call.request->backend();
    const BackendProps& p = *call.backend;
    tessera_backend_props c{};
    c.struct_size = sizeof c;
    c.device = p.device;
    c.name = p.name.c_str();
    c.thread_ranks = p.thread_ranks ? 1 : 0;
    c.probed = p.probed ? 1 : 0;
    c.bandwidth = p.bandwidth;
    c.latency = p.latency;
    c.source = p.source.c_str();
    const uint32_t size = out->struct_size;
    std::memcpy(out, &c, std::min<size_t>(size, sizeof c));
    out->struct_size = size;
  });
}

tessera_status c_trial(void* ctx, const char* strategy, const char* options, int64_t steps,
                       double* seconds_per_step, int64_t* peak_bytes) noexcept {
  const SelectRequest& req = *call_of(ctx).request;
  if (!req.trial) {
    set_host_call_error(req.no_trial_reason);
    return TESSERA_ERR_UNSUPPORTED;
  }
  return host_side([&] {
    TESSERA_CHECK(strategy != nullptr && seconds_per_step != nullptr && peak_bytes != nullptr,
                  TESSERA_ERR_INVALID_ARGUMENT, "trial: null argument");
    TESSERA_CHECK(steps >= 2, TESSERA_ERR_INVALID_ARGUMENT, "trial: ", steps,
                  " steps; a trial needs at least 2 (the first is not timed)");
    const toml::table table = candidate_options(options != nullptr ? options : "",
                                                fmt::format("candidate {} options", strategy));
    const TrialResult r = req.trial(strategy, table, steps);
    *seconds_per_step = r.seconds_per_step;
    *peak_bytes = r.peak_bytes;
  });
}

tessera_status c_compute_rate(void* ctx, double* flops_per_second,
                              double* update_seconds_per_element, const char** source) noexcept {
  SelectCall& call = call_of(ctx);
  if (!call.request->compute_rate) {
    set_host_call_error("the host has no model to time");
    return TESSERA_ERR_UNSUPPORTED;
  }
  if (!call.rate && call.rate_error.empty()) {
    try {
      call.rate = call.request->compute_rate();
    } catch (const Error& e) {
      if (e.status() != TESSERA_ERR_UNSUPPORTED) {
        set_host_call_error(e.what());
        return e.status();
      }
      call.rate_error = e.message();
    } catch (const std::exception& e) {
      set_host_call_error(e.what());
      return TESSERA_ERR_INTERNAL;
    }
  }
  if (!call.rate) {
    set_host_call_error(call.rate_error);
    return TESSERA_ERR_UNSUPPORTED;
  }
  if (flops_per_second == nullptr || update_seconds_per_element == nullptr || source == nullptr) {
    return TESSERA_ERR_INVALID_ARGUMENT;
  }
  *flops_per_second = call.rate->flops_per_second;
  *update_seconds_per_element = call.rate->update_seconds_per_element;
  *source = call.rate->source.c_str();
  return TESSERA_OK;
}

void c_report(void* ctx, const tessera_selection_row* row) noexcept {
  if (row == nullptr) return;
  try {
    tessera_selection_row r{};
    std::memcpy(&r, row, std::min<size_t>(row->struct_size, sizeof r));
    SelectionRow out;
    out.strategy = r.strategy != nullptr ? r.strategy : "";
    out.options = r.options != nullptr ? r.options : "";
    out.flags = r.flags;
    out.estimate = r.estimate;
    out.estimate.struct_size = sizeof out.estimate;
    out.step_seconds = r.step_seconds;
    out.compute_seconds = r.compute_seconds;
    out.comm_seconds = r.comm_seconds;
    out.bubble_seconds = r.bubble_seconds;
    out.measured_seconds = out.has(TESSERA_ROW_MEASURED) ? r.measured_seconds : -1;
    out.reason = r.reason != nullptr ? r.reason : "";
    call_of(ctx).rows.push_back(std::move(out));
  } catch (const std::exception&) {
    // Out of memory: the row is lost, and the ranking check reports it.
  }
}

// The installed strategies as a selector sees them.
struct StrategyList {
  std::vector<std::string> names;
  std::vector<tessera_strategy_info> infos;
};

StrategyList installed_strategies(const PluginRegistry& registry) {
  StrategyList list;
  list.names = registry.names(TESSERA_KIND_STRATEGY);
  for (const std::string& name : list.names) {
    const auto plugin = registry.find(TESSERA_KIND_STRATEGY, name);
    const tessera_plugin_descriptor& d = plugin->descriptor();
    const auto* api = static_cast<const tessera_strategy_api*>(d.api);
    tessera_strategy_info info{};
    info.name = d.name;
    info.summary = d.summary;
    info.options = d.options;
    info.num_options = d.num_options;
    info.can_estimate =
        api != nullptr &&
                api->struct_size >= offsetof(tessera_strategy_api, estimate) + sizeof(void*) &&
                api->estimate != nullptr
            ? 1
            : 0;
    list.infos.push_back(info);
  }
  return list;
}

std::string plural(std::size_t n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

}  // namespace

void check_batch_feeds(int64_t batch_size, int64_t micro_batches, int32_t data_size,
                       const std::string& strategy, int world) {
  const int64_t needed = int64_t{data_size} * micro_batches;
  if (batch_size >= needed) return;
  throw Error(TESSERA_ERR_INVALID_ARGUMENT,
              fmt::format("data.batch_size = {} is too small: strategy '{}' on {} ranks trains {} "
                          "data-parallel slices x data.micro_batches = {}, and every micro-batch "
                          "needs at least one example (use data.batch_size >= {})",
                          batch_size, strategy, world, data_size, micro_batches, needed));
}

tessera_estimate estimate_fed(const StrategyPlugin& strategy, const ModelDescription& model,
                              int world_size, int ranks_per_node, int32_t compression) {
  const tessera_estimate e = strategy.estimate(model, world_size, ranks_per_node, compression);
  check_batch_feeds(model.c().global_batch, std::max<int64_t>(model.c().micro_batches, 1),
                    e.data_size, strategy.name(), world_size);
  return e;
}

int32_t compression_code(const std::optional<PluginChoice>& compression,
                         const PluginRegistry& registry) {
  if (!compression) return 0;
  const CompressorPlugin plugin(registry, compression->name, &compression->options,
                                compression->options_where);
  const std::unique_ptr<CompressorPlugin::Instance> instance = plugin.create();
  return 1 + static_cast<int32_t>(plugin.api()->kind(instance->get()));
}

BatchSpec batch_spec(const Config& config) {
  BatchSpec batch;
  batch.global_batch = config.data.batch_size;
  batch.micro_batches = config.data.micro_batches;
  batch.optimizer_slots = static_cast<int32_t>(make_optimizer(config.optimizer)->slots());
  return batch;
}

tessera_estimate estimate_config(const Config& config, const PluginRegistry& registry,
                                 int world_size, int ranks_per_node) {
  const StrategyPlugin strategy(registry, config.strategy.name, &config.strategy.options,
                                config.strategy.options_where);
  const std::unique_ptr<model::Model> model = model::make_model(config.model, registry);
  const ModelDescription desc(*model, batch_spec(config));
  return strategy.estimate(desc, world_size, ranks_per_node > 0 ? ranks_per_node : world_size,
                           compression_code(config.compression, registry));
}

MemoryBudget available_memory() {
  const int64_t available = mem_available();
  const int64_t limit = cgroup_limit();
  if (limit > 0 && (available == 0 || limit < available)) {
    return {limit, fmt::format("cgroup memory limit {}", format_memory(limit))};
  }
  if (available > 0)
    return {available, fmt::format("available memory {}", format_memory(available))};
  return {};
}

MemoryBudget memory_budget(const Config& config, int local_ranks) {
  if (config.run.memory_per_rank > 0) return {config.run.memory_per_rank, "run.memory_per_rank"};
  const int ranks = std::max(local_ranks, 1);
  const MemoryBudget machine = available_memory();
  TESSERA_CHECK(machine.bytes > 0, TESSERA_ERR_UNSUPPORTED,
                "cannot detect the memory available to a rank (no MemAvailable in /proc/meminfo, "
                "no cgroup limit): set run.memory_per_rank, e.g. \"2GiB\"");
  return {machine.bytes / ranks, fmt::format("{} / {}", machine.source, ranks_text(ranks))};
}

BackendProps probe_comm(Communicator& comm) {
  BackendProps p;
  p.name = comm.backend_name();
  p.probed = true;
  const int n = comm.size();
  if (n == 1) {
    p.source = "one rank: no communication";
    return p;
  }
  std::vector<float> one(1, 1.0f);
  std::vector<float> one_out(1);
  constexpr std::size_t kBandwidthFloats = std::size_t{1} << 20;  // 4 MiB
  std::vector<float> big(kBandwidthFloats, 1.0f);
  std::vector<float> big_out(kBandwidthFloats);
  const auto buffer = [](std::vector<float>& v) {
    tessera_buffer b{};
    b.data = v.data();
    b.count = v.size();
    b.dtype = TESSERA_F32;
    b.device = {TESSERA_DEVICE_CPU, 0};
    return b;
  };
  const auto small = [&] { comm.allreduce(buffer(one), buffer(one_out), TESSERA_SUM); };
  const auto large = [&] { comm.allreduce(buffer(big), buffer(big_out), TESSERA_SUM); };
  small();  // connections and buffers set up before timing
  large();
  p.latency = best_seconds(3, 10, small);
  const double seconds = best_seconds(3, 2, large);
  const double bus_bytes = 2.0 * (n - 1) / n * static_cast<double>(kBandwidthFloats * 4);
  p.bandwidth = bus_bytes / std::max(seconds, 1e-9);
  p.source = fmt::format(
      "probed: allreduce over {} ranks, {:.2f} GB/s bus bandwidth at 4 MiB, "
      "{:.1f} us at 4 bytes",
      n, p.bandwidth / 1e9, p.latency * 1e6);
  return p;
}

BackendProps probe_thread_backend(const Config& config, const PluginRegistry& registry,
                                  int world_size) {
  if (world_size <= 1) return assumed_backend(config.backend.name, true, "one rank");
  BackendSettings settings;
  settings.world_size = world_size;
  settings.timeout = timeout_ms(config.backend.timeout_s, "backend.timeout_s");
  const std::unique_ptr<Backend> backend =
      open_backend(registry, config.backend.name, &config.backend.options,
                   config.backend.options_where, settings);
  TESSERA_CHECK(backend->thread_ranks(), TESSERA_ERR_INVALID_ARGUMENT, "backend '",
                config.backend.name, "' runs process ranks; probe it from its ranks");
  BackendProps lead;
  std::vector<std::unique_ptr<Communicator>> comms(static_cast<std::size_t>(world_size));
  std::mutex mu;
  run_rank_threads(
      world_size,
      [&](int rank) {
        auto comm = backend->connect(rank);
        Communicator* mine = comm.get();
        {
          const std::lock_guard lock(mu);
          comms[static_cast<std::size_t>(rank)] = std::move(comm);
        }
        BackendProps p = probe_comm(*mine);
        if (rank == 0) lead = std::move(p);
      },
      [&](int /*rank*/, const std::string& message) {
        const std::lock_guard lock(mu);
        for (auto& c : comms) {
          if (c) c->abort(message);
        }
      });
  lead.thread_ranks = true;
  return lead;
}

BackendProps assumed_backend(const std::string& name, bool thread_ranks, const std::string& why) {
  BackendProps p;
  p.name = name;
  p.thread_ranks = thread_ranks;
  p.probed = false;
  // Ranks as threads copy through shared memory; process backends here talk
  // over loopback TCP or shared memory; across machines a 10 GbE link is
  // a cautious guess.
  p.bandwidth = thread_ranks ? 4e9 : 1.25e9;
  p.latency = thread_ranks ? 20e-6 : 100e-6;
  p.source =
      fmt::format("assumed ({}): {:.2f} GB/s, {:.0f} us", why, p.bandwidth / 1e9, p.latency * 1e6);
  return p;
}

ModelRate measure_model_rate(const model::Model& model, const ModelDescription& desc,
                             const Optimizer& optimizer, int64_t examples, int64_t limit_bytes) {
  double flops = 0;
  double activations = 0;
  for (const UnitSpec& u : desc.units()) {
    flops += u.forward_flops + u.backward_flops;
    activations += u.activation_bytes;
  }
  flops *= static_cast<double>(examples);
  const double bytes =
      static_cast<double>(4 * (4 + optimizer.slots())) * static_cast<double>(desc.params()) +
      2.0 * activations * static_cast<double>(examples);
  TESSERA_CHECK(bytes <= static_cast<double>(limit_bytes), TESSERA_ERR_UNSUPPORTED, "model '",
                model.name(), "' needs about ", format_memory(static_cast<int64_t>(bytes)),
                " to run one micro-batch here, more than the ", format_memory(limit_bytes),
                " a timing run may take");
  model::ModelParams params(model);
  model::ModelParams grads(model);
  const DataShape& shape = model.data_shape();
  const Batch batch = Batch::make(examples, shape.seq_len, shape.features);
  const auto run = [&] {
    (void)model::reference_forward_backward(model, params, grads, batch, 1.0f);
  };
  run();  // warm-up: first-touch of buffers, library set-up
  double best = best_seconds(1, 1, run);
  if (best < 1.0) best = std::min(best, best_seconds(1, 1, run));

  // What a step does per parameter element besides the units: zero the
  // gradient, then the optimizer's update (memory-bound passes).
  const auto n = static_cast<std::size_t>(desc.params());
  std::vector<float> flat(n, 0.5f);
  std::vector<float> flat_grads(n, 0.0f);
  OptimizerState state = optimizer.make_state(n);
  int64_t update_step = 0;
  const auto update = [&] {
    std::fill(flat_grads.begin(), flat_grads.end(), 1e-3f);
    optimizer.step(flat, flat_grads, state, ++update_step, 1e-3f);
  };
  update();  // first touch
  const double update_seconds = best_seconds(3, 1, update);

  ModelRate r;
  r.flops_per_second = flops / std::max(best, 1e-9);
  r.update_seconds_per_element = n > 0 ? update_seconds / static_cast<double>(n) : 0.0;
  r.source = fmt::format(
      "measured: model '{}' forward and backward of {} example{} on one thread, {:.1f} ms, "
      "{:.2f} GFLOP/s; {} update of its {} parameters {:.2f} ms",
      model.name(), examples, examples == 1 ? "" : "s", best * 1e3, r.flops_per_second / 1e9,
      optimizer.name(), n, update_seconds * 1e3);
  return r;
}

std::function<ModelRate()> model_rate_probe(const model::Model& model, const ModelDescription& desc,
                                            const Optimizer& optimizer, int world_size) {
  const tessera_model_desc& c = desc.c();
  const int64_t slice = (c.global_batch + world_size - 1) / std::max(world_size, 1);
  const int64_t micro = std::max<int64_t>(c.micro_batches, 1);
  const int64_t examples = std::max<int64_t>((slice + micro - 1) / micro, 1);
  return [&model, &desc, &optimizer, examples] {
    return measure_model_rate(model, desc, optimizer, examples);
  };
}

std::string SelectionRow::label() const {
  return options.empty() ? strategy : strategy + " {" + options + "}";
}

// [strategy.options] keys that are not the selector's own options.
constexpr std::array<std::string_view, 1> kNotSelectorOptions = {"selector"};

void selector_from_config(const Config& config, SelectRequest& request) {
  request.compression = config.compression;
  request.selector = kDefaultSelector;
  request.options = nullptr;
  request.options_where = config.strategy.options_where;
  if (config.strategy.name != kAutoStrategy) return;
  request.options = &config.strategy.options;
  if (const toml::node* node = config.strategy.options.get("selector")) {
    const auto* name = node->as_string();
    if (name == nullptr) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  config.strategy.options_where + ": 'selector'" +
                      ::tessera::detail::node_origin(*node) +
                      " must be a string naming a selector plugin, got " +
                      ::tessera::detail::toml_type_phrase(node->type()));
    }
    request.selector = name->get();
  }
}

Selection run_selector(const SelectRequest& request) {
  TESSERA_CHECK(request.registry != nullptr && request.model != nullptr, TESSERA_ERR_INTERNAL,
                "run_selector: no registry or model");
  const auto plugin = request.registry->get(TESSERA_KIND_SELECTOR, request.selector);
  const tessera_plugin_descriptor& d = plugin->descriptor();
  const OptionValues options =
      resolve_options(std::span<const tessera_option_decl>(d.options, d.num_options),
                      request.options, request.options_where, kNotSelectorOptions);
  const auto* api = static_cast<const tessera_selector_api*>(d.api);

  const StrategyList strategies = installed_strategies(*request.registry);
  SelectCall call;
  call.request = &request;
  call.compression = compression_code(request.compression, *request.registry);
  const std::string budget_source = request.budget.source;
  tessera_select_env env{};
  env.struct_size = sizeof env;
  env.world_size = request.world_size;
  env.ranks_per_node = request.ranks_per_node;
  env.num_strategies = static_cast<int32_t>(strategies.infos.size());
  env.memory_budget = request.budget.bytes;
  env.budget_source = budget_source.c_str();
  env.model = &request.model->c();
  env.strategies = strategies.infos.data();
  env.ctx = &call;
  env.estimate = &c_estimate;
  env.backend = &c_backend;
  env.trial = &c_trial;
  env.report = &c_report;
  env.compute_rate = &c_compute_rate;

  const std::string who =
      fmt::format("selector '{}' ({})", request.selector, plugin->path().string());
  throw_if_failed(api->select(plugin->host().api(), &options, &env), who);

  Selection s;
  s.selector = request.selector;
  s.selector_file = plugin->path().string();
  s.world_size = request.world_size;
  s.ranks_per_node = request.ranks_per_node;
  s.budget = request.budget;
  s.backend = std::move(call.backend);
  s.compute_rate = std::move(call.rate);
  s.rows = std::move(call.rows);
  std::size_t chosen = 0;
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    if (s.rows[i].has(TESSERA_ROW_CHOSEN)) {
      ++chosen;
      s.chosen = i;
    }
  }
  TESSERA_CHECK(chosen == 1, TESSERA_ERR_INTERNAL, who, " reported ",
                plural(s.rows.size(), "candidate"), " with ", chosen,
                " chosen; a selector chooses exactly one");
  const std::string& name = s.choice().strategy;
  TESSERA_CHECK(
      std::find(strategies.names.begin(), strategies.names.end(), name) != strategies.names.end(),
      TESSERA_ERR_INTERNAL, who, " chose strategy '", name, "', which is not installed");
  return s;
}

TrialRunner thread_trial_runner(const Config& config, const PluginRegistry& registry) {
  return
      [&config, &registry](const std::string& strategy, const toml::table& options, int64_t steps) {
        Config c = config;
        c.strategy.name = strategy;
        c.strategy.options = options;
        c.strategy.options_where = fmt::format("trial of {}", strategy);
        c.run.steps = steps;
        c.run.log_every = 1;
        c.run.metrics.clear();
        c.checkpoint = CheckpointSection{};
        c.optimizer.warmup_steps = std::min(c.optimizer.warmup_steps, steps);
        std::ostringstream sink;
        RunOptions o;
        o.out = &sink;
        const RunResult r = run_training(c, registry, o);
        TrialResult t;
        double sum = 0;
        int64_t counted = 0;
        for (std::size_t i = 1; i < r.logged.size(); ++i) {
          sum += r.logged[i].step_seconds;
          ++counted;
        }
        t.seconds_per_step = counted > 0 ? sum / static_cast<double>(counted) : r.mean_step_seconds;
        for (const MemoryStats& m : r.memory) t.peak_bytes = std::max(t.peak_bytes, m.total_peak);
        return t;
      };
}

std::string no_trials_reason(const std::string& backend) {
  return fmt::format(
      "trials need ranks that are threads of one process; backend '{}' runs process ranks",
      backend);
}

toml::table candidate_options(const std::string& text, const std::string& where) {
  try {
    toml::table parsed = toml::parse("o = {" + text + "}");
    const toml::table* inner = parsed["o"].as_table();
    TESSERA_CHECK(inner != nullptr, TESSERA_ERR_INVALID_ARGUMENT, where, ": not a table");
    return *inner;
  } catch (const toml::parse_error& e) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                fmt::format("{}: '{}' is not TOML key = value pairs separated by \", \": {}", where,
                            text, e.description()));
  }
}

std::vector<std::string> selection_lines(const Selection& s) {
  std::vector<std::string> lines;
  const SelectionRow& c = s.choice();
  lines.push_back(fmt::format(
      "strategy auto: selector '{}' chose {} on {} ranks ({} per node), budget {} per rank ({})",
      s.selector, c.label(), s.world_size, s.ranks_per_node, format_memory(s.budget.bytes),
      s.budget.source));
  if (s.backend) lines.push_back("  backend " + s.backend->name + ": " + s.backend->source);
  if (s.compute_rate) lines.push_back("  compute: " + s.compute_rate->source);
  lines.push_back("  chosen: " + c.label() + ": " + c.reason);
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    if (i == s.chosen) continue;
    lines.push_back("  " + s.rows[i].label() + ": " + s.rows[i].reason);
  }
  return lines;
}

int local_world_size_from_env() {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    try {
      const int n = std::stoi(value);
      if (n >= 1) return n;
    } catch (const std::exception&) {
      continue;
    }
  }
  return 1;
}

}  // namespace tessera::train

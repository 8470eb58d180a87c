// plan_run: every check that needs no rank, and the objects the ranks share.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "invalid_input.hpp"
#include "prepared_run.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/options.hpp"
#include "tessera/core/rank_threads.hpp"
#include "tessera/core/train/checkpoint_dir.hpp"
#include "tessera/core/train/compute_rate.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace detail {
namespace {

std::span<const tessera_option_decl> declared_options(const tessera_plugin_descriptor& d) {
  if (d.options == nullptr) return {};
  return {d.options, d.num_options};
}

// Capability bits of a backend's table, 0 if the table is too small.
uint32_t backend_capabilities(const tessera_plugin_descriptor& d) noexcept {
  const auto* api = static_cast<const tessera_backend_api*>(d.api);
  if (api == nullptr ||
      api->struct_size < offsetof(tessera_backend_api, capabilities) + sizeof(api->capabilities)) {
    return 0;
  }
  return api->capabilities;
}

void plan_backend(const Config& config, const PluginRegistry& registry, RunPlan& plan) {
  const auto plugin = registry.get(TESSERA_KIND_BACKEND, config.backend.name);
  plan.backend_options = resolve_options(declared_options(plugin->descriptor()),
                                         &config.backend.options, config.backend.options_where);
  plan.backend = config.backend.name;
  plan.backend_file = plugin->path();
  plan.thread_ranks =
      (backend_capabilities(plugin->descriptor()) & TESSERA_BACKEND_CAP_THREAD_RANKS) != 0;
  plan.world_size = config.run.world_size;
  const RankThreads threads = rank_threads(
      config.run, plan.thread_ranks ? config.run.world_size : local_world_size_from_env());
  plan.threads_per_rank = threads.threads;
  plan.threads_source = threads.source;
  // Every rank of such a backend is a thread of this process: refuse a world
  // the process cannot start before any rank does (and at --dry-run).
  if (plan.thread_ranks) {
    const std::string excess =
        rank_thread_excess(config.run.world_size,
                           fmt::format("run.world_size = {}", config.run.world_size), plan.backend);
    if (!excess.empty()) fail(excess);
  }
}

// a * b, or std::nullopt when it does not fit in int64_t.
std::optional<int64_t> checked_product(int64_t a, int64_t b) noexcept {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// The counts the run multiplies must fit the 64-bit sizes it computes with:
// the elements of a global batch (and their bytes) and the examples of the
// whole run.
void check_products(const Config& config, const DataShape& shape, const std::string& model) {
  const int64_t batch = config.data.batch_size;
  const bool sequence = shape.is_sequence();
  const int64_t width = sequence ? shape.seq_len : shape.features;
  const char* per_example = sequence ? "seq_len" : "features";
  const auto elements = checked_product(batch, std::max<int64_t>(width, 1));
  if (!elements || !checked_product(*elements, 4)) {
    fail(fmt::format(
        "data.batch_size = {} times the {} = {} of model '{}' overflows the 64-bit count of "
        "{} (and their bytes) in a batch; lower data.batch_size",
        batch, per_example, width, model, sequence ? "tokens" : "features"));
  }
  if (!checked_product(config.run.steps, batch)) {
    fail(fmt::format(
        "run.steps = {} times data.batch_size = {} overflows the 64-bit count of examples the "
        "run draws; lower run.steps or data.batch_size",
        config.run.steps, batch));
  }
}

// The metadata of a checkpoint to resume from must describe this model.
void check_resume(const CheckpointInfo& info, const Config& config, const model::Model& model) {
  const auto value = [&](const char* key) {
    const auto it = info.metadata.find(key);
    return it == info.metadata.end() ? std::string() : it->second;
  };
  if (!value("model").empty() && value("model") != config.model.name) {
    fail("checkpoint.resume: '" + info.file.string() + "' was written for model '" +
         value("model") + "', but [model] name is '" + config.model.name + "'");
  }
  check_parameters_file(info.file, model, "checkpoint.resume");
  const auto logger = get_logger("train");
  if (!value("seed").empty() && value("seed") != std::to_string(config.run.seed)) {
    logger->warn(
        "resuming '{}' written with run.seed {} under run.seed {}: the data order differs "
        "from the uninterrupted run",
        info.file.string(), value("seed"), config.run.seed);
  }
  if (!value("steps").empty() && value("steps") != std::to_string(config.run.steps)) {
    logger->warn(
        "resuming '{}' written by a run of {} steps under run.steps = {}: the learning-rate "
        "schedule now spans {} steps, so the learning rate from step {} on differs from the "
        "original run's",
        info.file.string(), value("steps"), config.run.steps, config.run.steps, info.step + 1);
  }
  if (!value("batch_size").empty() &&
      value("batch_size") != std::to_string(config.data.batch_size)) {
    logger->warn("resuming '{}' written with data.batch_size {} under data.batch_size {}",
                 info.file.string(), value("batch_size"), config.data.batch_size);
  }
  if (!value("optimizer").empty() && value("optimizer") != config.optimizer.name) {
    logger->warn(
        "resuming '{}' written with optimizer '{}' under '{}': its optimizer state is "
        "not used",
        info.file.string(), value("optimizer"), config.optimizer.name);
  }
}

// Strategy "auto" with ranks as threads of this process: the selector runs
// here with the backend probed by the run's own world of rank threads.
// Whether `a` and `b` name the same existing file.
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  return !b.empty() && std::filesystem::equivalent(a, b, ec) && !ec;
}

// Whether `path` (which need not exist) is a file that checkpointing into
// `dir` writes or replaces: its `latest`, its lock file, or anything in a
// step directory. Other files in `dir` are left alone by the run.
bool checkpoint_owned(const std::filesystem::path& path, const std::filesystem::path& dir) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  if (ec) return false;
  const std::filesystem::path d = std::filesystem::weakly_canonical(dir, ec);
  if (ec) return false;
  const auto [end, at] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  if (end != d.end() || at == p.end()) return false;
  const std::string first = at->string();
  return first == kLatestFile || first == kLockFile || parse_checkpoint_dir_name(first).has_value();
}

// run.metrics is opened for writing (truncated by a fresh run): it must not
// be a file the run reads or writes otherwise, nor an existing file that
// is not a metrics file (whose lines are JSON objects), which it would
// destroy.
void check_metrics_path(const Config& config) {
  const std::filesystem::path metrics(config.run.metrics);
  const auto refuse = [&](const std::string& why) {
    fail("run.metrics = '" + config.run.metrics + "' " + why + "; choose another run.metrics");
  };
  const std::pair<const char*, std::filesystem::path> inputs[] = {
      {"the configuration file", config.file},
      {"data.path", config.data.path},
      {"model.init", config.model.init}};
  for (const auto& [what, file] : inputs) {
    if (same_file(metrics, file)) refuse(std::string("is ") + what + ", which the run reads");
  }
  if (!config.checkpoint.dir.empty() && checkpoint_owned(metrics, config.checkpoint.dir)) {
    refuse("is a file of checkpoint.dir '" + config.checkpoint.dir +
           "' that checkpointing writes or replaces (its latest, its lock or a step directory)");
  }
  std::ifstream in(metrics, std::ios::binary);
  char first = 0;
  if (in && in.get(first) && first != '{') {
    refuse(
        "exists and is not a metrics file (its first byte is not '{'): writing the metrics "
        "would destroy it");
  }
}

void select_for_threads(const Config& config, const PluginRegistry& registry, PreparedRun& run) {
  const ModelDescription model(*run.model, batch_spec(config));
  SelectRequest request;
  selector_from_config(config, request);
  request.registry = &registry;
  request.model = &model;
  request.world_size = config.run.world_size;
  request.ranks_per_node = config.run.world_size;
  request.budget = memory_budget(config, config.run.world_size);
  request.backend = [&] { return probe_thread_backend(config, registry, config.run.world_size); };
  request.compute_rate = model_rate_probe(*run.model, model, *run.optimizer, config.run.world_size);
  request.trial = thread_trial_runner(config, registry);
  run.selection = run_selector(request);
  adopt_choice(registry, *run.selection, run);
}

}  // namespace

void adopt_choice(const PluginRegistry& registry, const Selection& selection, PreparedRun& run) {
  const SelectionRow& choice = selection.choice();
  const std::string where =
      fmt::format("selector '{}' choice {}", selection.selector, choice.label());
  const toml::table options = candidate_options(choice.options, where);
  run.strategy = std::make_unique<StrategyPlugin>(registry, choice.strategy, &options, where);
  run.strategy->check(selection.world_size);
  run.plan.strategy = run.strategy->name();
  run.plan.strategy_file = run.strategy->path();
  run.plan.strategy_options = run.strategy->options();
}

void select_on_ranks(const Config& config, const PluginRegistry& registry, Communicator& comm,
                     PreparedRun& run) {
  BackendProps props = probe_comm(comm);
  props.thread_ranks = false;
  std::string choice;  // "<strategy>\n<options>"
  if (comm.rank() == 0) {
    const ModelDescription model(*run.model, batch_spec(config));
    SelectRequest request;
    selector_from_config(config, request);
    request.registry = &registry;
    request.model = &model;
    request.world_size = comm.size();
    request.ranks_per_node = std::clamp(local_world_size_from_env(), 1, comm.size());
    request.budget = memory_budget(config, request.ranks_per_node);
    request.backend = [&props] { return props; };
    request.compute_rate = model_rate_probe(*run.model, model, *run.optimizer, comm.size());
    request.no_trial_reason = no_trials_reason(config.backend.name);
    run.selection = run_selector(request);
    choice = run.selection->choice().strategy + '\n' + run.selection->choice().options;
  }
  // Rank 0's choice, whatever the other ranks' probes measured.
  int64_t length = static_cast<int64_t>(choice.size());
  comm.broadcast(tessera_buffer{&length, 1, TESSERA_I64, {TESSERA_DEVICE_CPU, 0}}, 0);
  choice.resize(static_cast<std::size_t>(length));
  comm.broadcast(
      tessera_buffer{
          choice.data(), static_cast<uint64_t>(length), TESSERA_U8, {TESSERA_DEVICE_CPU, 0}},
      0);
  if (comm.rank() == 0) {
    adopt_choice(registry, *run.selection, run);
    return;
  }
  const std::size_t split = choice.find('\n');
  Selection received;
  received.world_size = comm.size();
  received.rows.emplace_back();
  received.rows[0].strategy = choice.substr(0, split);
  received.rows[0].options = split == std::string::npos ? "" : choice.substr(split + 1);
  received.rows[0].flags = TESSERA_ROW_CHOSEN;
  SelectRequest named;
  selector_from_config(config, named);
  received.selector = named.selector;
  adopt_choice(registry, received, run);
}

PreparedRun prepare_run(const Config& config, const PluginRegistry& registry) {
  PreparedRun run;
  RunPlan& plan = run.plan;
  plan_backend(config, registry, plan);

  // Strategy "auto" is chosen once the model is built (below).
  const bool automatic = config.strategy.name == kAutoStrategy;
  if (!automatic) {
    run.strategy = std::make_unique<StrategyPlugin>(
        registry, config.strategy.name, &config.strategy.options, config.strategy.options_where);
    plan.strategy = run.strategy->name();
    plan.strategy_file = run.strategy->path();
    plan.strategy_options = run.strategy->options();
    // Process backends take the world size from their launcher; check what
    // the config states, the rest is checked once connected.
    if (plan.thread_ranks || config.run.world_size != 1) {
      run.strategy->check(config.run.world_size);
    }
  } else {
    plan.strategy = kAutoStrategy;
  }

  if (config.compression) {
    const std::string& name = config.compression->name;
    if (registry.find(TESSERA_KIND_COMPRESSOR, name) == nullptr) {
      std::string where = config.compression->options_where;
      if (const size_t at = where.rfind(".options]"); at != std::string::npos) {
        where.replace(at, 9, "]");
      }
      try {
        (void)registry.get(TESSERA_KIND_COMPRESSOR, name);
      } catch (const Error& e) {
        fail(where + ": key 'name' names unknown compressor '" + name + "': " + e.what());
      }
    }
    run.compressor = std::make_unique<CompressorPlugin>(registry, config.compression->name,
                                                        &config.compression->options,
                                                        config.compression->options_where);
    plan.compressor = run.compressor->name();
    plan.compressor_file = run.compressor->path();
    plan.compressor_options = run.compressor->options();
  }

  run.model = model::make_model(config.model, registry);
  plan.model = run.model->name();
  plan.model_file = run.model->plugin().path();
  plan.parameters = run.model->parameter_count();
  run.optimizer = make_optimizer(config.optimizer);
  if (config.run.steps >= 1 && config.optimizer.warmup_steps > config.run.steps) {
    const std::string& where = config.optimizer.warmup_where;
    fail(fmt::format(
        "{}'optimizer.warmup_steps' = {} exceeds 'run.steps' = {}: the "
        "learning-rate warm-up must end within the run",
        where.empty() ? "" : where + ": ", config.optimizer.warmup_steps, config.run.steps));
  }
  if (config.run.steps >= 1) run.schedule = make_lr_schedule(config.optimizer, config.run);

  check_products(config, run.model->data_shape(), plan.model);
  // With ranks as threads the choice is made here, once, for all of them;
  // process ranks choose once connected (select_on_ranks).
  if (automatic && plan.thread_ranks) select_for_threads(config, registry, run);

  DataOptions data_options;
  data_options.token_bytes = config.data.token_bytes;
  run.dataset = make_dataset(config.data, run.model->data_shape(), config.run.seed, data_options);
  plan.data = run.dataset->describe();
  plan.global_batch = config.data.batch_size;
  plan.micro_batches = config.data.micro_batches;
  plan.tokens_per_example = run.model->data_shape().seq_len;
  for (std::size_t u = 0; u < run.model->size(); ++u) {
    const tessera_unit_cost cost = run.model->unit_cost(u);
    plan.model_flops_per_step += cost.forward_flops + cost.backward_flops;
  }
  plan.model_flops_per_step *= static_cast<double>(plan.global_batch);
  if (config.data.micro_batches > config.data.batch_size) {
    fail(
        fmt::format("data.micro_batches = {} exceeds data.batch_size = {}: every micro-batch "
                    "needs at least one example",
                    config.data.micro_batches, config.data.batch_size));
  }

  // Before any rank starts, and without creating it: run_training creates
  // and locks it (CheckpointDirLock).
  if (!config.checkpoint.dir.empty()) check_checkpoint_dir(config.checkpoint.dir);

  if (!config.model.init.empty()) {
    plan.init_file = config.model.init;
    check_parameters_file(plan.init_file, *run.model, "model.init");
  }
  if (config.checkpoint.resume) {
    run.resume = find_latest_checkpoint(config.checkpoint.dir);
    if (run.resume) {
      check_resume(*run.resume, config, *run.model);
      plan.resume_file = run.resume->file;
      plan.resume_step = run.resume->step;
    }
  }
  if (!config.run.metrics.empty()) check_metrics_path(config);
  return run;
}

std::vector<std::string> describe_run(const PreparedRun& run, const Config& config) {
  const RunPlan& p = run.plan;
  std::vector<std::string> lines;
  lines.push_back(
      fmt::format("model: {} ({}), {} parameters", p.model, p.model_file.string(), p.parameters));
  lines.push_back("data: " + p.data);
  lines.push_back(fmt::format("strategy: {} on {} {} ({} backend)", p.strategy, p.world_size,
                              p.thread_ranks ? "ranks as threads" : "process ranks", p.backend));
  if (run.selection) {
    for (auto& line : selection_lines(*run.selection)) lines.push_back(std::move(line));
  } else if (!run.strategy) {
    lines.push_back("strategy auto: chosen once the process ranks connect");
  }
  if (!p.compressor.empty()) {
    std::string options;
    for (const auto& [key, value] : p.compressor_options.values) {
      options += (options.empty() ? "" : ", ") + key + " = " + option_value_text(value);
    }
    lines.push_back(fmt::format("compression: {} ({}){}", p.compressor, p.compressor_file.string(),
                                options.empty() ? "" : ", " + options));
  }
  lines.push_back(
      fmt::format("batch: {} examples per step, {} micro-batch{} per data-parallel "
                  "rank; optimizer {} (lr {})",
                  p.global_batch, p.micro_batches, p.micro_batches == 1 ? "" : "es",
                  config.optimizer.name, config.optimizer.lr));
  if (!p.resume_file.empty()) {
    lines.push_back(
        fmt::format("resuming from {} (step {})", p.resume_file.string(), p.resume_step));
    return lines;
  }
  if (config.checkpoint.resume) {
    lines.push_back("checkpoint.resume: no checkpoint in '" + config.checkpoint.dir +
                    "' yet, starting from step 1");
  }
  if (config.run.device == ComputeDevice::cuda) {
    lines.emplace_back("device: cuda (each rank on the CUDA device of its LOCAL_RANK)");
  }
  if (config.run.precision == ComputePrecision::tf32) {
    lines.emplace_back(
        "precision: tf32 (f32 matrix products on the TF32 tensor cores: inputs rounded to a "
        "10-bit mantissa, accumulated in f32; everything else f32)");
  }
  if (config.run.precision == ComputePrecision::bf16) {
    lines.emplace_back(
        "precision: bf16 (matrix products on bfloat16 inputs, accumulated in f32; f32 "
        "parameters, gradients and optimizer state)");
  }
  if (config.run.precision == ComputePrecision::f16) {
    lines.push_back(fmt::format(
        "precision: f16 (matrix products on float16 inputs, accumulated in f32; f32 "
        "parameters, gradients and optimizer state); dynamic loss scaling from {}: a step whose "
        "gradients overflow is skipped and halves the scale, {} steps without one double it",
        config.run.loss_scale, config.run.loss_scale_window));
  }
  if (!p.init_file.empty()) {
    lines.push_back("initial weights: " + p.init_file.string());
  } else {
    lines.push_back(fmt::format("initial weights: the model's init, seed {}", config.run.seed));
  }
  return lines;
}

}  // namespace detail

namespace {

// What the strategy's estimate refuses for the built model, which its
// create would refuse once the ranks start, and a batch its data-parallel
// ranks cannot share. Only where the world size is known before the ranks
// connect, and only for a strategy that estimates.
void check_strategy_takes_the_model(const Config& config, const PluginRegistry& registry,
                                    const detail::PreparedRun& run) {
  if (!run.strategy || !run.strategy->can_estimate()) return;
  if (!run.plan.thread_ranks && config.run.world_size == 1) return;
  const int world = config.run.world_size;
  const ModelDescription model(*run.model, batch_spec(config));
  (void)estimate_fed(*run.strategy, model, world, world,
                     compression_code(config.compression, registry));
}

}  // namespace

RunPlan plan_run(const Config& config, const PluginRegistry& registry) {
  detail::PreparedRun run = detail::prepare_run(config, registry);
  check_strategy_takes_the_model(config, registry, run);
  return run.plan;
}

}  // namespace tessera::train

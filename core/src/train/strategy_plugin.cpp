// The host's handle on a strategy plugin and on one rank's strategy object
// (see strategy_host.hpp). Plugin failures come back through the plugin's
// set_error message (take_thread_error / throw_if_failed), as for backends.
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/device.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace {

// The strategy table of `plugin`, checked for the functions this host calls.
const tessera_strategy_api* strategy_table(const LoadedPlugin& plugin) {
  const auto* api = static_cast<const tessera_strategy_api*>(plugin.descriptor().api);
  const std::string who =
      "strategy '" + std::string(plugin.name()) + "' (" + plugin.path().string() + ")";
  TESSERA_CHECK(plugin.kind() == TESSERA_KIND_STRATEGY, TESSERA_ERR_INVALID_ARGUMENT, who,
                " is not a strategy plugin");
  TESSERA_CHECK(api != nullptr, TESSERA_ERR_INVALID_ARGUMENT, who, " has no api table");
  constexpr std::size_t needed = offsetof(tessera_strategy_api, save) + sizeof(void*);
  TESSERA_CHECK(api->struct_size >= needed, TESSERA_ERR_INVALID_ARGUMENT, who,
                ": api table struct_size ", api->struct_size, " is smaller than the ", needed,
                " bytes this host needs");
  TESSERA_CHECK(api->check != nullptr && api->create != nullptr && api->destroy != nullptr &&
                    api->load != nullptr && api->step != nullptr && api->save != nullptr,
                TESSERA_ERR_INVALID_ARGUMENT, who, ": api table has a NULL function");
  return api;
}

}  // namespace

// ---- StrategyPlugin ----

StrategyPlugin::StrategyPlugin(const PluginRegistry& registry, const std::string& name,
                               const toml::table* options, const std::string& where)
    : plugin_(registry.get(TESSERA_KIND_STRATEGY, name)),
      api_(strategy_table(*plugin_)),
      name_(name) {
  const auto& d = plugin_->descriptor();
  options_ = resolve_options(std::span<const tessera_option_decl>(d.options, d.num_options),
                             options, where);
}

void StrategyPlugin::check(int world_size) const {
  const tessera_status status = api_->check(plugin_->host().api(), &options_, world_size);
  // check() judges the options and the world size together, and its
  // message says which one it refuses; anything but a refusal is a failure
  // of the plugin itself.
  const bool refusal = status == TESSERA_ERR_INVALID_ARGUMENT || status == TESSERA_ERR_UNSUPPORTED;
  const std::string ranks = std::to_string(world_size) + (world_size == 1 ? " rank" : " ranks");
  throw_if_failed(status,
                  refusal
                      ? "strategy '" + name_ + "' refused its options or world size (" + ranks + ")"
                      : "strategy '" + name_ + "' failed its check for " + ranks,
                  path());
}

bool StrategyPlugin::can_estimate() const noexcept {
  return api_->struct_size >= offsetof(tessera_strategy_api, estimate) + sizeof(void*) &&
         api_->estimate != nullptr;
}

tessera_estimate StrategyPlugin::estimate(const ModelDescription& model, int world_size,
                                          int ranks_per_node, int32_t compression) const {
  TESSERA_CHECK(can_estimate(), TESSERA_ERR_UNSUPPORTED, "strategy '", name_, "' (",
                path().string(), ") has no estimate (strategy interface 2.3)");
  check(world_size);
  tessera_estimate_args args{};
  args.struct_size = sizeof args;
  args.world_size = world_size;
  args.ranks_per_node = ranks_per_node;
  args.compression = compression;
  args.model = &model.c();
  tessera_estimate out{};
  out.struct_size = sizeof out;
  const tessera_status status = api_->estimate(plugin_->host().api(), &options_, &args, &out);
  const bool refusal = status == TESSERA_ERR_INVALID_ARGUMENT || status == TESSERA_ERR_UNSUPPORTED;
  const std::string ranks = std::to_string(world_size) + (world_size == 1 ? " rank" : " ranks");
  throw_if_failed(
      status,
      refusal ? "strategy '" + name_ + "' cannot run model '" + model.name() + "' on " + ranks
              : "strategy '" + name_ + "' failed its estimate for " + ranks,
      path());
  out.struct_size = sizeof out;
  return out;
}

std::unique_ptr<StrategyInstance> StrategyPlugin::create(
    Communicator& comm, const model::Model& model, const Optimizer& optimizer,
    const CompressorPlugin::Instance* compressor, const std::string& compressor_name, bool joining,
    int64_t micro_batches) const {
  // A feature of strategy interface 2.<minor> the run uses: a plugin older
  // than that is refused, naming the feature and what to do instead.
  const auto require_minor = [&](int minor, const char* feature, const std::string& use,
                                 const char* instead) {
    const InterfaceVersion v = interface_version(plugin_->descriptor());
    TESSERA_CHECK(v.major > 2 || (v.major == 2 && v.minor >= minor), TESSERA_ERR_INVALID_ARGUMENT,
                  "strategy '", name_, "' (", path().string(), ") has strategy interface ", v.major,
                  ".", v.minor, ", older than ", feature, " (2.", minor, "): it cannot ", use,
                  "; rebuild it against the current SDK or ", instead);
  };
  if (compressor != nullptr) {
    require_minor(4, "gradient compression", "use [compression] name = '" + compressor_name + "'",
                  "remove [compression]");
  }
  if (run_precision() == ComputePrecision::f16) {
    require_minor(6, "loss scaling", "train with run.precision = \"f16\"", "use \"bf16\"");
  }
  if (joining) {
    require_minor(7, "joining a running world", "admit this rank (TESSERA_JOIN=1)",
                  "start the rank with the others");
  }
  std::unique_ptr<StrategyInstance> inst(new StrategyInstance());
  inst->plugin_ = plugin_;
  inst->api_ = api_;
  inst->options_ = options_;
  inst->name_ = name_;
  inst->rank_ = comm.rank();

  tessera_strategy_env& env = inst->env_;
  env.struct_size = sizeof env;
  env.rank = comm.rank();
  env.world_size = comm.size();
  env.model_api_major = static_cast<uint16_t>(model.interface().major);
  env.model_api_minor = static_cast<uint16_t>(model.interface().minor);
  env.backend = comm.c_api();
  env.world = comm.c_handle();
  env.model_api = model.api();
  env.model = model.handle();
  env.optim_api = optimizer_api();
  env.optimizer = as_c_optimizer(optimizer);
  env.joining = joining ? 1 : 0;
  env.micro_batches = micro_batches;
  if (compressor != nullptr) {
    inst->compressor_name_ = compressor_name;
    env.compressor_api = compressor->api();
    env.compressor = compressor->get();
    env.compressor_name = inst->compressor_name_.c_str();
  }

  tessera_strategy_layout layout{};
  layout.struct_size = sizeof layout;
  layout.data_rank = 0;
  layout.data_size = 1;
  tessera_strategy* handle = nullptr;
  const tessera_status status =
      api_->create(plugin_->host().api(), &inst->options_, &env, &handle, &layout);
  inst->handle_ = status == TESSERA_OK ? handle : nullptr;  // the destructor frees it
  throw_if_failed(status, inst->where("create"), inst->plugin_->path());
  TESSERA_CHECK(handle != nullptr, TESSERA_ERR_INTERNAL, inst->where("create"),
                ": returned no strategy");
  TESSERA_CHECK(
      layout.data_size >= 1 && layout.data_rank >= 0 && layout.data_rank < layout.data_size,
      TESSERA_ERR_INTERNAL, inst->where("create"), ": invalid layout data_rank ", layout.data_rank,
      " of data_size ", layout.data_size);
  layout.struct_size = sizeof layout;
  inst->layout_ = layout;
  return inst;
}

// ---- StrategyInstance ----

StrategyInstance::~StrategyInstance() {
  if (handle_ != nullptr) api_->destroy(handle_);
}

std::string StrategyInstance::where(const char* what) const {
  return "strategy '" + name_ + "' (rank " + std::to_string(rank_) + "): " + what;
}

void StrategyInstance::load(const StateSource& source) {
  const tessera_state_reader reader = make_reader(source);
  throw_if_failed(api_->load(handle_, &reader), where("load from ") + source.describe(),
                  plugin_->path());
}

tessera_step_result StrategyInstance::step(std::span<const Batch> micro_batches,
                                           std::span<const float> loss_scales, int64_t step,
                                           float lr, double max_grad_norm, int64_t global_examples,
                                           int64_t global_tokens, float grad_scale) {
  TESSERA_CHECK(!micro_batches.empty(), TESSERA_ERR_INVALID_ARGUMENT, where("step "), step,
                ": no micro-batches");
  TESSERA_CHECK(loss_scales.size() == micro_batches.size(), TESSERA_ERR_INVALID_ARGUMENT,
                where("step "), step, ": ", micro_batches.size(), " micro-batches but ",
                loss_scales.size(), " loss scales");
  std::vector<const tessera_batch*> batches;
  batches.reserve(micro_batches.size());
  int64_t local_examples = 0;
  int64_t local_tokens = 0;
  for (const Batch& b : micro_batches) {
    batches.push_back(as_c_batch(b));
    local_examples += b.size;
    local_tokens += b.size * b.seq_len;  // seq_len 0: not a sequence batch
  }

  tessera_step_args args{};
  args.struct_size = sizeof args;
  args.num_micro = static_cast<int32_t>(batches.size());
  args.step = step;
  args.micro_batches = batches.data();
  args.loss_scales = loss_scales.data();
  args.lr = lr;
  args.grad_scale = grad_scale;
  args.max_grad_norm = max_grad_norm;
  args.local_examples = local_examples;
  args.global_examples = global_examples;
  args.local_tokens = local_tokens;
  args.global_tokens = global_tokens;

  tessera_step_result result{};
  result.struct_size = sizeof result;
  throw_if_failed(api_->step(handle_, &args, &result), where("step ") + std::to_string(step),
                  plugin_->path());
  return result;
}

tessera_strategy_world StrategyInstance::world() {
  TESSERA_CHECK(api_->struct_size >= offsetof(tessera_strategy_api, world) + sizeof(void*) &&
                    api_->world != nullptr,
                TESSERA_ERR_INTERNAL, where("step"),
                ": reported that its world changed, but it has no `world` function (strategy "
                "interface 2.5)");
  tessera_strategy_world w{};
  w.struct_size = sizeof w;
  throw_if_failed(api_->world(handle_, &w), where("world"), plugin_->path());
  TESSERA_CHECK(w.comm != nullptr && w.world_size >= 1 && w.rank >= 0 && w.rank < w.world_size &&
                    w.layout.data_size >= 1 && w.layout.data_rank >= 0 &&
                    w.layout.data_rank < w.layout.data_size,
                TESSERA_ERR_INTERNAL, where("world"), ": invalid world: rank ", w.rank, " of ",
                w.world_size, ", data rank ", w.layout.data_rank, " of ", w.layout.data_size,
                w.comm == nullptr ? ", no communicator" : "");
  rank_ = w.rank;
  layout_ = w.layout;
  layout_.struct_size = sizeof layout_;
  return w;
}

CollectedState StrategyInstance::save(int64_t step, bool all_replicas) {
  CollectedState state;
  const tessera_state_writer writer =
      make_writer(state, all_replicas ? uint32_t{TESSERA_STATE_ALL_REPLICAS} : uint32_t{0}, step);
  throw_if_failed(api_->save(handle_, &writer), where("save"), plugin_->path());
  return state;
}

}  // namespace tessera::train

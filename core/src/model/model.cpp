// A plugin-built model as the host holds it, parameter storage and the
// reference trainer (see model.hpp). Plugin failures come back through the
// plugin's set_error message (throw_if_failed), as for other plugins.
#include "tessera/core/model/model.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "tessera/core/host_api.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {

// ---- Model::Context ----

Model::Context::Context(Context&& other) noexcept
    : api_(other.api_), ctx_(std::exchange(other.ctx_, nullptr)) {}

Model::Context& Model::Context::operator=(Context&& other) noexcept {
  if (this != &other) {
    if (ctx_ != nullptr) api_->context_destroy(ctx_);
    api_ = other.api_;
    ctx_ = std::exchange(other.ctx_, nullptr);
  }
  return *this;
}

Model::Context::~Context() {
  if (ctx_ != nullptr) api_->context_destroy(ctx_);
}

// ---- Model ----

namespace {

// The model table of `plugin`, checked for the functions this host calls.
const tessera_model_api* model_table(const LoadedPlugin& plugin) {
  const auto* api = static_cast<const tessera_model_api*>(plugin.descriptor().api);
  const std::string who =
      "model '" + std::string(plugin.name()) + "' (" + plugin.path().string() + ")";
  TESSERA_CHECK(plugin.kind() == TESSERA_KIND_MODEL, TESSERA_ERR_INVALID_ARGUMENT, who,
                " is not a model plugin");
  // A 2.0 table ends at backward_weight; later minors' functions are read
  // only where struct_size covers them.
  TESSERA_CHECK(api != nullptr && api->struct_size >=
                                      offsetof(tessera_model_api, backward_weight) + sizeof(void*),
                TESSERA_ERR_INVALID_ARGUMENT, who, ": api table is missing or too small");
  return api;
}

SplitHint from_c(tessera_split_kind split) noexcept {
  switch (split) {
    case TESSERA_SPLIT_COLUMN:
      return SplitHint::column;
    case TESSERA_SPLIT_ROW:
      return SplitHint::row;
    default:
      return SplitHint::none;
  }
}

}  // namespace

Model::Model(std::shared_ptr<LoadedPlugin> plugin, OptionValues options, const std::string& where)
    : plugin_(std::move(plugin)),
      options_(std::move(options)),
      api_(model_table(*plugin_)),
      version_(interface_version(plugin_->descriptor())),
      name_(plugin_->name()) {
  const std::string prefix = where + ": model '" + name_ + "'";
  const tessera_status status = api_->create(plugin_->host().api(), &options_, &handle_);
  if (status != TESSERA_OK) {
    handle_ = nullptr;
    throw_if_failed(status, prefix);
  }
  TESSERA_CHECK(handle_ != nullptr, TESSERA_ERR_INTERNAL, prefix, ": create returned no model");
  try {
    tessera_data_spec data{};
    data.struct_size = sizeof data;
    throw_if_failed(api_->data_spec(handle_, &data), prefix + " data_spec");
    shape_ = data.kind == TESSERA_DATA_SEQUENCES
                 ? DataShape::sequences(data.seq_len, data.vocab)
                 : DataShape::classification(data.features, data.classes);
    const int32_t n = api_->num_units(handle_);
    TESSERA_CHECK(n >= 1, TESSERA_ERR_INTERNAL, prefix, " has no units");
    units_.resize(static_cast<std::size_t>(n));
    for (int32_t u = 0; u < n; ++u) {
      UnitInfo& unit = units_[static_cast<std::size_t>(u)];
      const char* unit_name = api_->unit_name(handle_, u);
      TESSERA_CHECK(unit_name != nullptr, TESSERA_ERR_INTERNAL, prefix, " unit ", u,
                    " has no name");
      unit.name = unit_name;
      unit.flags = api_->unit_flags(handle_, u);
      const int32_t np = api_->num_params(handle_, u);
      for (int32_t p = 0; p < np; ++p) {
        tessera_param_info info{};
        info.struct_size = sizeof info;
        throw_if_failed(api_->param_info(handle_, u, p, &info),
                        call_name(static_cast<std::size_t>(u), "param_info"));
        ParamSpec spec;
        spec.name = info.name != nullptr ? info.name : "";
        spec.shape.assign(info.shape, info.shape + info.ndim);
        spec.split = from_c(info.split);
        spec.split_blocks = std::max(info.split_blocks, 1);
        const bool tied = info.owner_unit != u || info.owner_param != p;
        if (tied) spec.tied_to = info.full_name != nullptr ? info.full_name : "";
        unit.params.push_back(std::move(spec));
        unit.owners.push_back({static_cast<std::size_t>(info.owner_unit),
                               static_cast<std::size_t>(info.owner_param)});
      }
    }
  } catch (...) {
    api_->destroy(handle_);
    throw;
  }
}

Model::~Model() {
  if (handle_ != nullptr) api_->destroy(handle_);
}

std::string Model::call_name(std::size_t unit, const char* what) const {
  std::string text = "model '" + name_ + "'";
  if (unit < units_.size() && !units_[unit].name.empty())
    text += " unit '" + units_[unit].name + "'";
  return text + " " + what;
}

tessera_unit_cost Model::unit_cost(std::size_t i) const {
  tessera_unit_cost cost{};
  cost.struct_size = sizeof cost;
  throw_if_failed(api_->unit_cost(handle_, static_cast<int32_t>(i), &cost),
                  call_name(i, "unit_cost"));
  return cost;
}

ParamRef Model::owner(std::size_t unit, std::size_t param) const {
  return units_.at(unit).owners.at(param);
}

int64_t Model::parameter_count() const noexcept {
  int64_t n = 0;
  for (const UnitInfo& u : units_) {
    for (const ParamSpec& s : u.params) {
      if (s.tied_to.empty()) n += s.numel();
    }
  }
  return n;
}

void Model::init_unit(std::size_t unit, std::span<float* const> params, uint64_t seed) const {
  TESSERA_CHECK(params.size() == units_.at(unit).params.size(), TESSERA_ERR_INVALID_ARGUMENT,
                call_name(unit, "init"), ": ", params.size(), " parameter pointers for ",
                units_.at(unit).params.size(), " parameters");
  throw_if_failed(api_->init_params(handle_, static_cast<int32_t>(unit), params.data(), seed),
                  call_name(unit, "init"));
}

Model::Context Model::make_context(std::size_t unit) const {
  tessera_unit_ctx* ctx = nullptr;
  throw_if_failed(api_->context_create(handle_, static_cast<int32_t>(unit), &ctx),
                  call_name(unit, "context_create"));
  return {api_, ctx};
}

ConstView Model::forward(std::size_t unit, Context& ctx, std::span<const float* const> params,
                         const Batch& batch, ConstView x, float loss_scale) const {
  tessera_unit_call call{};
  call.struct_size = sizeof call;
  call.loss_scale = loss_scale;
  call.batch = reinterpret_cast<const tessera_batch*>(&batch);
  call.params = params.data();
  tessera_matrix out{};
  throw_if_failed(api_->forward(handle_, static_cast<int32_t>(unit), ctx.raw(), &call,
                                {x.data, x.rows, x.cols}, &out),
                  call_name(unit, "forward"));
  return {out.data, out.rows, out.cols};
}

ConstView Model::backward(std::size_t unit, Context& ctx, std::span<const float* const> params,
                          std::span<float* const> grads, ConstView grad_output) const {
  tessera_unit_call call{};
  call.struct_size = sizeof call;
  call.loss_scale = 1.0f;
  call.params = params.data();
  call.grads = grads.data();
  tessera_matrix grad_in{};
  throw_if_failed(api_->backward(handle_, static_cast<int32_t>(unit), ctx.raw(), &call,
                                 {grad_output.data, grad_output.rows, grad_output.cols}, &grad_in),
                  call_name(unit, "backward"));
  return {grad_in.data, grad_in.rows, grad_in.cols};
}

std::unique_ptr<Model> make_model(const ModelSection& section, const PluginRegistry& registry) {
  const std::string where = section.params_where.empty() ? "[model]" : section.params_where;
  const std::shared_ptr<LoadedPlugin> plugin = registry.find(TESSERA_KIND_MODEL, section.name);
  if (plugin == nullptr) {
    // The registry's message lists the known models and any rejected file
    // that claimed the name.
    try {
      (void)registry.get(TESSERA_KIND_MODEL, section.name);
    } catch (const Error& e) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  where + ": key 'name' names unknown model '" + section.name + "': " + e.what());
    }
  }
  const auto& d = plugin->descriptor();
  OptionValues options = resolve_options(
      std::span<const tessera_option_decl>(d.options, d.num_options), &section.params, where);
  return std::make_unique<Model>(plugin, std::move(options), where);
}

// ---- ModelParams ----

ModelParams::ModelParams(const Model& model) {
  buffers_.resize(model.size());
  for (std::size_t i = 0; i < model.size(); ++i) {
    for (const ParamSpec& s : model.params(i)) {
      buffers_[i].emplace_back(s.tied_to.empty() ? static_cast<std::size_t>(s.numel()) : 0, 0.0f);
    }
  }
  ptrs_.resize(model.size());
  cptrs_.resize(model.size());
  for (std::size_t i = 0; i < model.size(); ++i) {
    for (std::size_t j = 0; j < buffers_[i].size(); ++j) {
      const ParamRef ref = model.owner(i, j);
      float* p = buffers_[ref.unit][ref.param].data();
      ptrs_[i].push_back(p);
      cptrs_[i].push_back(p);
    }
  }
}

std::vector<float> ModelParams::flatten() const {
  std::vector<float> out;
  for (const auto& unit : buffers_) {
    for (const auto& b : unit) out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

void ModelParams::zero() {
  for (auto& unit : buffers_) {
    for (auto& b : unit) std::fill(b.begin(), b.end(), 0.0f);
  }
}

void ModelParams::init(const Model& model, uint64_t seed) {
  for (std::size_t i = 0; i < model.size(); ++i) model.init_unit(i, unit(i), seed);
}

// ---- reference trainer ----

namespace {

// Runs every unit forward on fresh contexts; returns them and the loss.
double run_forward(const Model& model, const ModelParams& params, const Batch& batch,
                   float loss_scale, std::vector<Model::Context>& contexts) {
  contexts.clear();
  ConstView out;
  for (std::size_t i = 0; i < model.size(); ++i) {
    contexts.push_back(model.make_context(i));
    out = model.forward(i, contexts.back(), params.unit_const(i), batch, out, loss_scale);
  }
  const float* loss = out.data;
  if (loss == nullptr || out.rows * out.cols != 1) {
    throw Error(TESSERA_ERR_INTERNAL, "model '" + model.name() + "': last unit returned no loss");
  }
  return static_cast<double>(*loss);
}

}  // namespace

double reference_loss(const Model& model, const ModelParams& params, const Batch& batch,
                      float loss_scale) {
  std::vector<Model::Context> contexts;
  return run_forward(model, params, batch, loss_scale, contexts);
}

double reference_forward_backward(const Model& model, const ModelParams& params, ModelParams& grads,
                                  const Batch& batch, float loss_scale) {
  std::vector<Model::Context> contexts;
  const double loss = run_forward(model, params, batch, loss_scale, contexts);
  ConstView grad;
  for (std::size_t i = model.size(); i-- > 0;) {
    grad = model.backward(i, contexts[i], params.unit_const(i), grads.unit(i), grad);
  }
  return loss;
}

}  // namespace tessera::model

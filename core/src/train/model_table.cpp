// tessera_model_api over the core's model::Model (see strategy_host.hpp).
//
// Handles: a tessera_model* is the model::Model, a tessera_batch* is the
// tessera::Batch and a tessera_unit_ctx* is a UnitCtx below. Every function
// that can fail returns a status and leaves its message for host last_error;
// no exception crosses the table.
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "host_call.hpp"
#include "tessera/core/train/strategy_host.hpp"

// One unit's per-micro-batch context as the C side sees it.
struct tessera_unit_ctx {
  const tessera::model::Model* model = nullptr;
  int32_t unit = 0;
  std::unique_ptr<tessera::model::UnitContext> ctx;
};

namespace tessera::train {
namespace {

using detail::guard_host_call;

const model::Model& as_model(const tessera_model* model) {
  TESSERA_CHECK(model != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "model is NULL");
  return *reinterpret_cast<const model::Model*>(model);
}

// The unit at index `unit`; throws naming the model and the index.
const model::Unit& unit_at(const model::Model& m, int32_t unit) {
  TESSERA_CHECK(unit >= 0 && static_cast<std::size_t>(unit) < m.size(),
                TESSERA_ERR_INVALID_ARGUMENT, "model '", m.name(), "' has no unit ", unit,
                " (it has ", m.size(), ")");
  return m.unit(static_cast<std::size_t>(unit));
}

// Checks that `ctx` was made for unit `unit` of `m`.
tessera_unit_ctx& checked_ctx(const model::Model& m, int32_t unit, tessera_unit_ctx* ctx) {
  TESSERA_CHECK(ctx != nullptr && ctx->ctx != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                "unit context is NULL");
  TESSERA_CHECK(ctx->model == &m && ctx->unit == unit, TESSERA_ERR_INVALID_ARGUMENT,
                "the context was created for unit ", ctx->unit, " of another call (",
                ctx->model == &m ? "same model" : "another model", "), not unit ", unit, " ('",
                m.unit(static_cast<std::size_t>(unit)).name(), "')");
  return *ctx;
}

// "model 'gpt' unit 'head' forward": the prefix of a failed call's message.
std::string call_name(const tessera_model* model, int32_t unit, const char* what) {
  if (model == nullptr) return std::string("model ") + what;
  const auto& m = *reinterpret_cast<const model::Model*>(model);
  std::string text = "model '" + m.name() + "'";
  if (unit >= 0 && static_cast<std::size_t>(unit) < m.size()) {
    text += " unit '" + m.unit(static_cast<std::size_t>(unit)).name() + "'";
  } else {
    text += " unit " + std::to_string(unit);
  }
  return text + " " + what;
}

tessera_split_hint to_c(model::SplitHint hint) noexcept {
  switch (hint) {
    case model::SplitHint::column:
      return TESSERA_SPLIT_COLUMN;
    case model::SplitHint::row:
      return TESSERA_SPLIT_ROW;
    default:
      return TESSERA_SPLIT_NONE;
  }
}

model::ConstView to_view(tessera_matrix m) noexcept { return {m.data, m.rows, m.cols}; }
tessera_matrix to_c(model::ConstView v) noexcept { return {v.data, v.rows, v.cols}; }

// ---- the table's functions ----

int32_t num_units(const tessera_model* model) noexcept {
  if (model == nullptr) return 0;
  return static_cast<int32_t>(reinterpret_cast<const model::Model*>(model)->size());
}

const char* unit_name(const tessera_model* model, int32_t unit) noexcept {
  if (model == nullptr || unit < 0) return nullptr;
  const auto& m = *reinterpret_cast<const model::Model*>(model);
  if (static_cast<std::size_t>(unit) >= m.size()) return nullptr;
  return m.unit(static_cast<std::size_t>(unit)).name().c_str();
}

int32_t num_params(const tessera_model* model, int32_t unit) noexcept {
  if (model == nullptr || unit < 0) return -1;
  const auto& m = *reinterpret_cast<const model::Model*>(model);
  if (static_cast<std::size_t>(unit) >= m.size()) return -1;
  return static_cast<int32_t>(m.unit(static_cast<std::size_t>(unit)).params().size());
}

tessera_status param_info(const tessera_model* model, int32_t unit, int32_t param,
                          tessera_param_info* out) noexcept {
  return guard_host_call(
      [&] { return call_name(model, unit, "param_info"); },
      [&] {
        const model::Model& m = as_model(model);
        const model::Unit& u = unit_at(m, unit);
        const auto specs = u.params();
        TESSERA_CHECK(param >= 0 && static_cast<std::size_t>(param) < specs.size(),
                      TESSERA_ERR_INVALID_ARGUMENT, "unit has no parameter ", param, " (it has ",
                      specs.size(), ")");
        TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "output is NULL");
        TESSERA_CHECK(out->struct_size >= sizeof(uint32_t), TESSERA_ERR_INVALID_ARGUMENT,
                      "output struct_size ", out->struct_size, " is too small");
        const model::ParamSpec& spec = specs[static_cast<std::size_t>(param)];
        const model::ParamRef owner =
            m.owner(static_cast<std::size_t>(unit), static_cast<std::size_t>(param));
        const model::Unit& owner_unit = m.unit(owner.unit);
        const model::ParamSpec& owner_spec = owner_unit.params()[owner.param];

        tessera_param_info info{};
        info.struct_size = sizeof info;
        info.split = to_c(spec.split);
        info.name = spec.name.c_str();  // the unit's spec lives as long as the model
        info.full_name = detail::interned(owner_unit.name() + "." + owner_spec.name);
        info.shape = owner_spec.shape.data();
        info.ndim = static_cast<int32_t>(owner_spec.shape.size());
        info.owner_unit = static_cast<int32_t>(owner.unit);
        info.owner_param = static_cast<int32_t>(owner.param);
        info.reserved = 0;
        info.numel = owner_spec.numel();
        // A caller built against a smaller struct gets the prefix it knows.
        const uint32_t size = out->struct_size < sizeof info ? out->struct_size : sizeof info;
        std::memcpy(out, &info, size);
        out->struct_size = size;
      });
}

tessera_status context_create(const tessera_model* model, int32_t unit,
                              tessera_unit_ctx** out) noexcept {
  return guard_host_call([&] { return call_name(model, unit, "context_create"); },
                         [&] {
                           const model::Model& m = as_model(model);
                           const model::Unit& u = unit_at(m, unit);
                           TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                                         "output is NULL");
                           auto ctx = std::make_unique<tessera_unit_ctx>();
                           ctx->model = &m;
                           ctx->unit = unit;
                           ctx->ctx = u.make_context();
                           *out = ctx.release();
                         });
}

void context_destroy(tessera_unit_ctx* ctx) noexcept { delete ctx; }

uint64_t context_bytes(const tessera_unit_ctx* ctx) noexcept {
  if (ctx == nullptr || ctx->ctx == nullptr) return 0;
  return static_cast<uint64_t>(ctx->ctx->bytes());
}

tessera_status forward(const tessera_model* model, int32_t unit, tessera_unit_ctx* ctx,
                       const float* const* params, const tessera_batch* batch, tessera_matrix x,
                       float loss_scale, tessera_matrix* out) noexcept {
  return guard_host_call(
      [&] { return call_name(model, unit, "forward"); },
      [&] {
        const model::Model& m = as_model(model);
        const model::Unit& u = unit_at(m, unit);
        tessera_unit_ctx& c = checked_ctx(m, unit, ctx);
        TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "output is NULL");
        const std::size_t n = u.params().size();
        TESSERA_CHECK(params != nullptr || n == 0, TESSERA_ERR_INVALID_ARGUMENT,
                      "parameter array is NULL (the unit has ", n, " parameters)");
        model::UnitInput input;
        input.batch = reinterpret_cast<const Batch*>(batch);
        input.x = to_view(x);
        input.loss_scale = loss_scale;
        const model::ConstView y =
            u.forward(*c.ctx, std::span<const float* const>(params, n), input);
        *out = to_c(y);
      });
}

tessera_status backward(const tessera_model* model, int32_t unit, tessera_unit_ctx* ctx,
                        const float* const* params, float* const* grads, tessera_matrix grad_output,
                        tessera_matrix* grad_input) noexcept {
  return guard_host_call(
      [&] { return call_name(model, unit, "backward"); },
      [&] {
        const model::Model& m = as_model(model);
        const model::Unit& u = unit_at(m, unit);
        tessera_unit_ctx& c = checked_ctx(m, unit, ctx);
        TESSERA_CHECK(grad_input != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "output is NULL");
        const std::size_t n = u.params().size();
        TESSERA_CHECK((params != nullptr && grads != nullptr) || n == 0,
                      TESSERA_ERR_INVALID_ARGUMENT,
                      "parameter or gradient array is NULL (the unit has ", n, " parameters)");
        const model::ConstView g =
            u.backward(*c.ctx, std::span<const float* const>(params, n),
                       std::span<float* const>(grads, n), to_view(grad_output));
        *grad_input = to_c(g);
      });
}

int64_t batch_examples(const tessera_batch* batch) noexcept {
  return batch != nullptr ? reinterpret_cast<const Batch*>(batch)->size : 0;
}

int64_t batch_tokens_per_example(const tessera_batch* batch) noexcept {
  if (batch == nullptr) return 0;
  const auto& b = *reinterpret_cast<const Batch*>(batch);
  return b.seq_len > 0 ? b.seq_len : 1;
}

constexpr tessera_model_api kModelApi = {sizeof(tessera_model_api),
                                         0,
                                         &num_units,
                                         &unit_name,
                                         &num_params,
                                         &param_info,
                                         &context_create,
                                         &context_destroy,
                                         &context_bytes,
                                         &forward,
                                         &backward,
                                         &batch_examples,
                                         &batch_tokens_per_example};

}  // namespace

const tessera_model_api* model_api() noexcept { return &kModelApi; }

const tessera_model* as_c_model(const model::Model& model) noexcept {
  return reinterpret_cast<const tessera_model*>(&model);
}

const tessera_batch* as_c_batch(const Batch& batch) noexcept {
  return reinterpret_cast<const tessera_batch*>(&batch);
}

}  // namespace tessera::train

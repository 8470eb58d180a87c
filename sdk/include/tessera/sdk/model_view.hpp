// Strategy-side view of a model (tessera_model_api, c/model.h): its units,
// their parameter slots, per-micro-batch contexts, and forward/backward calls
// that throw tessera::Error with the model's message when they fail.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/c/model.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::sdk {

// One parameter slot of a unit (see tessera_param_info).
struct ParamInfo {
  std::string name;       // within the unit
  std::string full_name;  // "<unit>.<param>" of the owner; the checkpoint key
  std::vector<int64_t> shape;
  int64_t numel = 0;
  tessera_split_kind split = TESSERA_SPLIT_REPLICATED;
  int32_t split_blocks = 1;  // equal blocks of the split dimension, each split separately
  int32_t owner_unit = 0;
  int32_t owner_param = 0;
  bool tied = false;  // storage belongs to (owner_unit, owner_param)
};

// A unit's per-micro-batch context; destroys itself.
class UnitContext {
 public:
  UnitContext() = default;
  UnitContext(const tessera_model_api* api, tessera_unit_ctx* ctx) : api_(api), ctx_(ctx) {}
  UnitContext(UnitContext&& o) noexcept : api_(o.api_), ctx_(std::exchange(o.ctx_, nullptr)) {}
  UnitContext& operator=(UnitContext&& o) noexcept {
    if (this != &o) {
      reset();
      api_ = o.api_;
      ctx_ = std::exchange(o.ctx_, nullptr);
    }
    return *this;
  }
  UnitContext(const UnitContext&) = delete;
  UnitContext& operator=(const UnitContext&) = delete;
  ~UnitContext() { reset(); }

  [[nodiscard]] tessera_unit_ctx* raw() const noexcept { return ctx_; }
  // Bytes of activations and outputs it holds now.
  [[nodiscard]] uint64_t bytes() const noexcept {
    return ctx_ != nullptr ? api_->context_bytes(ctx_) : 0;
  }
  void reset() noexcept {
    if (ctx_ != nullptr) api_->context_destroy(ctx_);
    ctx_ = nullptr;
  }

 private:
  const tessera_model_api* api_ = nullptr;
  tessera_unit_ctx* ctx_ = nullptr;
};

class ModelView {
 public:
  // `api_major`.`api_minor`: the model interface version `api` implements;
  // a major other than this SDK's TESSERA_MODEL_API_MAJOR is refused.
  ModelView(const Host& host, const tessera_model_api* api, const tessera_model* model,
            int api_major = TESSERA_MODEL_API_MAJOR, int api_minor = TESSERA_MODEL_API_MINOR)
      : host_(host), api_(api), model_(model) {
    TESSERA_CHECK(api != nullptr && model != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                  "strategy environment has no model");
    TESSERA_CHECK(api_major == TESSERA_MODEL_API_MAJOR, TESSERA_ERR_UNSUPPORTED,
                  "the model implements model interface ", api_major, ".", api_minor,
                  "; this strategy was built for model interface ", TESSERA_MODEL_API_MAJOR, ".x");
    const int32_t n = api_->num_units(model_);
    units_.resize(static_cast<size_t>(std::max(n, 0)));
    for (int32_t u = 0; u < n; ++u) {
      auto& unit = units_[static_cast<size_t>(u)];
      const char* name = api_->unit_name(model_, u);
      unit.name = name != nullptr ? name : "";
      const int32_t np = api_->num_params(model_, u);
      for (int32_t p = 0; p < np; ++p) {
        tessera_param_info info{};
        info.struct_size = sizeof info;
        detail::check_host_call(host_, api_->param_info(model_, u, p, &info), "model param_info");
        ParamInfo pi;
        pi.name = info.name;
        pi.full_name = info.full_name;
        pi.shape.assign(info.shape, info.shape + info.ndim);
        pi.numel = info.numel;
        pi.split = info.split;
        pi.split_blocks = info.split_blocks > 0 ? info.split_blocks : 1;
        pi.owner_unit = info.owner_unit;
        pi.owner_param = info.owner_param;
        pi.tied = info.owner_unit != u || info.owner_param != p;
        unit.params.push_back(std::move(pi));
      }
    }
  }

  [[nodiscard]] int32_t num_units() const noexcept { return static_cast<int32_t>(units_.size()); }
  [[nodiscard]] const std::string& unit_name(int32_t unit) const {
    return units_.at(static_cast<size_t>(unit)).name;
  }
  // Parameter slots of `unit` in declaration order.
  [[nodiscard]] const std::vector<ParamInfo>& params(int32_t unit) const {
    return units_.at(static_cast<size_t>(unit)).params;
  }

  [[nodiscard]] UnitContext make_context(int32_t unit) const {
    tessera_unit_ctx* ctx = nullptr;
    detail::check_host_call(host_, api_->context_create(model_, unit, &ctx),
                            "model context_create");
    return {api_, ctx};
  }

  // See tessera_model_api::forward / backward.
  // TESSERA_UNIT_* bits of `unit`.
  [[nodiscard]] uint32_t unit_flags(int32_t unit) const noexcept {
    return api_->unit_flags(model_, unit);
  }
  // Estimated cost of `unit` per example (see tessera_unit_cost).
  [[nodiscard]] tessera_unit_cost unit_cost(int32_t unit) const {
    tessera_unit_cost cost{};
    cost.struct_size = sizeof cost;
    detail::check_host_call(host_, api_->unit_cost(model_, unit, &cost), "model unit_cost");
    return cost;
  }

  // See tessera_model_api::forward / backward. `tp`: the tensor-parallel
  // group the parameters are split over, or null (whole parameters).
  tessera_matrix forward(int32_t unit, UnitContext& ctx, const float* const* params,
                         const tessera_batch* batch, tessera_matrix x, float loss_scale,
                         const tessera_tp_group* tp = nullptr) const {
    const tessera_unit_call call = make_call(params, nullptr, batch, loss_scale, tp);
    tessera_matrix out{};
    detail::check_host_call(host_, api_->forward(model_, unit, ctx.raw(), &call, x, &out),
                            "model forward");
    return out;
  }
  tessera_matrix backward(int32_t unit, UnitContext& ctx, const float* const* params,
                          float* const* grads, tessera_matrix grad_output,
                          const tessera_tp_group* tp = nullptr) const {
    const tessera_unit_call call = make_call(params, grads, nullptr, 1.0f, tp);
    tessera_matrix grad_in{};
    detail::check_host_call(host_,
                            api_->backward(model_, unit, ctx.raw(), &call, grad_output, &grad_in),
                            "model backward");
    return grad_in;
  }
  // The input half of backward (units with TESSERA_UNIT_SPLIT_BACKWARD).
  tessera_matrix backward_input(int32_t unit, UnitContext& ctx, const float* const* params,
                                tessera_matrix grad_output,
                                const tessera_tp_group* tp = nullptr) const {
    const tessera_unit_call call = make_call(params, nullptr, nullptr, 1.0f, tp);
    tessera_matrix grad_in{};
    detail::check_host_call(
        host_, api_->backward_input(model_, unit, ctx.raw(), &call, grad_output, &grad_in),
        "model backward_input");
    return grad_in;
  }
  // The weight half, after backward_input on the same context.
  void backward_weight(int32_t unit, UnitContext& ctx, const float* const* params,
                       float* const* grads, const tessera_tp_group* tp = nullptr) const {
    const tessera_unit_call call = make_call(params, grads, nullptr, 1.0f, tp);
    detail::check_host_call(host_, api_->backward_weight(model_, unit, ctx.raw(), &call),
                            "model backward_weight");
  }

  // Before training: throws what the model says a tensor-parallel group of
  // `size` ranks with `flags` (TESSERA_TP_*) cannot split, naming its
  // option ("tensor-parallel check: <reason>"). A model without the
  // check (interface 2.0, or NULL) accepts every group here and refuses in
  // forward instead.
  void check_tensor_parallel(int32_t size, uint32_t flags) const {
    if (api_->struct_size < offsetof(tessera_model_api, check_tensor_parallel) + sizeof(void*) ||
        api_->check_tensor_parallel == nullptr) {
      return;
    }
    detail::check_host_call(host_, api_->check_tensor_parallel(model_, size, flags),
                            "tensor-parallel check");
  }

  // Examples in a micro-batch (host accessor, host ABI 1.3).
  [[nodiscard]] int64_t batch_examples(const tessera_batch* batch) const {
    const tessera_host_api* h = host_.raw();
    TESSERA_CHECK(h != nullptr &&
                      h->struct_size >= offsetof(tessera_host_api, batch_examples) + sizeof(void*),
                  TESSERA_ERR_UNSUPPORTED, "the host has no batch accessors (needs ABI 1.3)");
    return h->batch_examples(h->ctx, batch);
  }

 private:
  static tessera_unit_call make_call(const float* const* params, float* const* grads,
                                     const tessera_batch* batch, float loss_scale,
                                     const tessera_tp_group* tp) noexcept {
    tessera_unit_call call{};
    call.struct_size = sizeof call;
    call.loss_scale = loss_scale;
    call.batch = batch;
    call.params = params;
    call.grads = grads;
    call.tp = tp;
    return call;
  }

  struct Unit {
    std::string name;
    std::vector<ParamInfo> params;
  };
  Host host_;
  const tessera_model_api* api_;
  const tessera_model* model_;
  std::vector<Unit> units_;
};

}  // namespace tessera::sdk

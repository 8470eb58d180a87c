// Stand-ins for the host's model, optimizer and state tables (see
// fake_tables.hpp).
#include "fake_tables.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <numeric>
#include <utility>

namespace tessera::test {

namespace {

struct FakeContext {
  const FakeModel* model = nullptr;
  int32_t unit = 0;
  bool has_forward = false;
  uint64_t bytes = 0;
  float loss_scale = 1.0F;
  float out = 0.0F;
  float grad_in = 0.0F;
};

FakeModel* model_of(const tessera_model* m) {
  return const_cast<FakeModel*>(reinterpret_cast<const FakeModel*>(m));  // NOLINT
}

}  // namespace

struct FakeModelTable {
  static int32_t num_units(const tessera_model* m) {
    return static_cast<int32_t>(model_of(m)->units_.size());
  }
  static const char* unit_name(const tessera_model* m, int32_t u) {
    const auto& units = model_of(m)->units_;
    return u >= 0 && static_cast<size_t>(u) < units.size() ? units[u].name.c_str() : nullptr;
  }
  static int32_t num_params(const tessera_model* m, int32_t u) {
    const auto& units = model_of(m)->units_;
    return u >= 0 && static_cast<size_t>(u) < units.size()
               ? static_cast<int32_t>(units[u].params.size())
               : -1;
  }
  static tessera_status param_info(const tessera_model* m, int32_t u, int32_t p,
                                   tessera_param_info* out) {
    const FakeModel* fm = model_of(m);
    const FakeParam& fp = fm->units_.at(u).params.at(p);
    out->split = TESSERA_SPLIT_REPLICATED;
    out->name = fp.name.c_str();
    out->full_name = fm->full_names_.at(u).at(p).c_str();
    out->shape = fp.shape.data();
    out->ndim = static_cast<int32_t>(fp.shape.size());
    out->owner_unit = fp.tied_unit >= 0 ? fp.tied_unit : u;
    out->owner_param = fp.tied_unit >= 0 ? fp.tied_param : p;
    out->split_blocks = 1;
    out->numel = std::accumulate(fp.shape.begin(), fp.shape.end(), int64_t{1},
                                 [](int64_t a, int64_t b) { return a * b; });
    return TESSERA_OK;
  }
  static tessera_status context_create(const tessera_model* m, int32_t u, tessera_unit_ctx** out) {
    auto* ctx = new FakeContext();
    ctx->model = model_of(m);
    ctx->unit = u;
    *out = reinterpret_cast<tessera_unit_ctx*>(ctx);
    return TESSERA_OK;
  }
  static void context_destroy(tessera_unit_ctx* ctx) { delete reinterpret_cast<FakeContext*>(ctx); }
  static uint64_t context_bytes(const tessera_unit_ctx* ctx) {
    return reinterpret_cast<const FakeContext*>(ctx)->bytes;
  }
  static float sum_params(const FakeUnit& unit, const float* const* params) {
    float s = 0.0F;
    for (size_t p = 0; p < unit.params.size(); ++p) {
      const int64_t n = std::accumulate(unit.params[p].shape.begin(), unit.params[p].shape.end(),
                                        int64_t{1}, [](int64_t a, int64_t b) { return a * b; });
      for (int64_t i = 0; i < n; ++i) s += params[p][i];
    }
    return s;
  }
  static tessera_status forward(const tessera_model* m, int32_t u, tessera_unit_ctx* c,
                                const tessera_unit_call* call, tessera_matrix x,
                                tessera_matrix* out) {
    const float* const* params = call->params;
    const tessera_batch* batch = call->batch;
    const float loss_scale = call->loss_scale;
    FakeModel* fm = model_of(m);
    auto* ctx = reinterpret_cast<FakeContext*>(c);
    fm->calls.push_back("F" + std::to_string(u));
    const FakeUnit& unit = fm->units_.at(u);
    const float in = u == 0 ? reinterpret_cast<const FakeBatch*>(batch)->value
                            : (x.data != nullptr ? x.data[0] : 0.0F);
    float y = in + sum_params(unit, params);
    if (static_cast<size_t>(u) + 1 == fm->units_.size()) y *= loss_scale;
    ctx->out = y;
    ctx->loss_scale = loss_scale;
    ctx->has_forward = true;
    ctx->bytes = unit.context_bytes;
    *out = tessera_matrix{&ctx->out, 1, 1};
    return TESSERA_OK;
  }
  static tessera_status backward(const tessera_model* m, int32_t u, tessera_unit_ctx* c,
                                 const tessera_unit_call* call, tessera_matrix grad_output,
                                 tessera_matrix* grad_input) {
    float* const* grads = call->grads;
    FakeModel* fm = model_of(m);
    auto* ctx = reinterpret_cast<FakeContext*>(c);
    fm->calls.push_back("B" + std::to_string(u));
    if (!ctx->has_forward) return TESSERA_ERR_INVALID_ARGUMENT;
    const FakeUnit& unit = fm->units_.at(u);
    const bool last = static_cast<size_t>(u) + 1 == fm->units_.size();
    float g = grad_output.data != nullptr ? grad_output.data[0] : 1.0F;
    if (last) g *= ctx->loss_scale;
    for (size_t p = 0; p < unit.params.size(); ++p) {
      const int64_t n = std::accumulate(unit.params[p].shape.begin(), unit.params[p].shape.end(),
                                        int64_t{1}, [](int64_t a, int64_t b) { return a * b; });
      for (int64_t i = 0; i < n; ++i) grads[p][i] += g;
    }
    ctx->grad_in = g;
    *grad_input = u == 0 ? tessera_matrix{} : tessera_matrix{&ctx->grad_in, 1, 1};
    return TESSERA_OK;
  }
  // What strategies do not call: building, data spec, init, cost and the
  // split backward.
  static tessera_status create(const tessera_host_api* /*host*/, const tessera_options* /*opts*/,
                               tessera_model** /*out*/) {
    return TESSERA_ERR_UNSUPPORTED;
  }
  static void destroy(tessera_model* /*model*/) {}
  static tessera_status data_spec(const tessera_model* /*m*/, tessera_data_spec* /*out*/) {
    return TESSERA_ERR_UNSUPPORTED;
  }
  static uint32_t unit_flags(const tessera_model* /*m*/, int32_t /*u*/) { return 0; }
  static tessera_status unit_cost(const tessera_model* /*m*/, int32_t /*u*/,
                                  tessera_unit_cost* /*out*/) {
    return TESSERA_ERR_UNSUPPORTED;
  }
  static tessera_status init_params(const tessera_model* /*m*/, int32_t /*u*/,
                                    float* const* /*params*/, uint64_t /*seed*/) {
    return TESSERA_ERR_UNSUPPORTED;
  }
  static tessera_status backward_input(const tessera_model* /*m*/, int32_t /*u*/,
                                       tessera_unit_ctx* /*c*/, const tessera_unit_call* /*call*/,
                                       tessera_matrix /*grad_output*/,
                                       tessera_matrix* /*grad_input*/) {
    return TESSERA_ERR_UNSUPPORTED;
  }
  static tessera_status backward_weight(const tessera_model* /*m*/, int32_t /*u*/,
                                        tessera_unit_ctx* /*c*/,
                                        const tessera_unit_call* /*call*/) {
    return TESSERA_ERR_UNSUPPORTED;
  }

  // A model interface 2.0 table: it ends before check_tensor_parallel.
  static constexpr tessera_model_api kApi{offsetof(tessera_model_api, check_tensor_parallel),
                                          0,
                                          &create,
                                          &destroy,
                                          &data_spec,
                                          &num_units,
                                          &unit_name,
                                          &unit_flags,
                                          &num_params,
                                          &param_info,
                                          &unit_cost,
                                          &init_params,
                                          &context_create,
                                          &context_destroy,
                                          &context_bytes,
                                          &forward,
                                          &backward,
                                          &backward_input,
                                          &backward_weight,
                                          nullptr};
};

FakeModel::FakeModel(std::vector<FakeUnit> units) : units_(std::move(units)) {
  for (const FakeUnit& u : units_) {
    std::vector<std::string> names;
    for (const FakeParam& p : u.params) {
      names.push_back(p.tied_unit >= 0 ? units_.at(p.tied_unit).name + "." +
                                             units_.at(p.tied_unit).params.at(p.tied_param).name
                                       : u.name + "." + p.name);
    }
    full_names_.push_back(std::move(names));
  }
}
const tessera_model_api* FakeModel::api() const noexcept { return &FakeModelTable::kApi; }
const tessera_model* FakeModel::handle() const noexcept {
  return reinterpret_cast<const tessera_model*>(this);
}

namespace {

struct FakeOptimState {
  std::vector<std::vector<float>> slots;
};

const FakeOptimizer* optimizer_of(const tessera_optimizer* o) {
  return reinterpret_cast<const FakeOptimizer*>(o);
}

}  // namespace

struct FakeOptimizerTable {
  static const std::vector<std::string>& slots(const tessera_optimizer* o) {
    return optimizer_of(o)->slots_;
  }
  static const char* name(const tessera_optimizer* /*o*/) { return "fake"; }
  static int32_t num_slots(const tessera_optimizer* o) {
    return static_cast<int32_t>(slots(o).size());
  }
  static const char* slot_name(const tessera_optimizer* o, int32_t k) {
    return k >= 0 && static_cast<size_t>(k) < slots(o).size() ? slots(o)[k].c_str() : nullptr;
  }
  static tessera_status state_create(const tessera_optimizer* o, uint64_t elements,
                                     tessera_optim_state** out) {
    auto* s = new FakeOptimState();
    s->slots.assign(slots(o).size(), std::vector<float>(elements, 0.0F));
    *out = reinterpret_cast<tessera_optim_state*>(s);
    return TESSERA_OK;
  }
  static void state_destroy(tessera_optim_state* s) { delete reinterpret_cast<FakeOptimState*>(s); }
  static float* state_slot(tessera_optim_state* s, int32_t k) {
    auto* st = reinterpret_cast<FakeOptimState*>(s);
    return k >= 0 && static_cast<size_t>(k) < st->slots.size() ? st->slots[k].data() : nullptr;
  }
  // params -= lr * grads; the state counts the updates in slot 0.
  static tessera_status step(const tessera_optimizer* /*o*/, tessera_optim_state* s,
                             uint64_t offset, float* params, const float* grads, uint64_t count,
                             int64_t /*step*/, float lr) {
    auto* st = reinterpret_cast<FakeOptimState*>(s);
    for (uint64_t i = 0; i < count; ++i) {
      params[i] -= lr * grads[i];
      if (!st->slots.empty()) st->slots[0][offset + i] += 1.0F;
    }
    return TESSERA_OK;
  }

  static constexpr tessera_optimizer_api kApi{sizeof(tessera_optimizer_api),
                                              0,
                                              &name,
                                              &num_slots,
                                              &slot_name,
                                              &state_create,
                                              &state_destroy,
                                              &state_slot,
                                              &step};
};

const tessera_optimizer_api* FakeOptimizer::api() const noexcept {
  return &FakeOptimizerTable::kApi;
}
const tessera_optimizer* FakeOptimizer::handle() const noexcept {
  return reinterpret_cast<const tessera_optimizer*>(this);
}

namespace {

FakeStore* store_of(void* ctx) { return static_cast<FakeStore*>(ctx); }

int32_t store_has(void* ctx, const char* name) {
  return store_of(ctx)->tensors.count(name) != 0 ? 1 : 0;
}

// The flat indices of the elements of slice `s` (a flat range or a box) of
// a tensor of `shape`, in the slice's order; false when it is not inside.
bool store_slice_indices(const tessera_tensor_slice* s, const std::vector<int64_t>& shape,
                         std::vector<size_t>& out) {
  const auto numel = static_cast<uint64_t>(std::accumulate(
      shape.begin(), shape.end(), int64_t{1}, [](int64_t a, int64_t b) { return a * b; }));
  out.clear();
  if (s->box_offset == nullptr) {
    if (s->offset + s->count > numel) return false;
    for (uint64_t i = 0; i < s->count; ++i) out.push_back(static_cast<size_t>(s->offset + i));
    return true;
  }
  const size_t n = shape.size();
  uint64_t count = 1;
  for (size_t d = 0; d < n; ++d) {
    if (s->box_offset[d] < 0 || s->box_extent[d] < 0 ||
        s->box_offset[d] + s->box_extent[d] > shape[d]) {
      return false;
    }
    count *= static_cast<uint64_t>(s->box_extent[d]);
  }
  if (count != s->count) return false;
  std::vector<int64_t> at(n, 0);
  for (uint64_t i = 0; i < count; ++i) {
    int64_t flat = 0;
    for (size_t d = 0; d < n; ++d) flat = flat * shape[d] + s->box_offset[d] + at[d];
    out.push_back(static_cast<size_t>(flat));
    for (size_t d = n; d-- > 0;) {
      if (++at[d] < s->box_extent[d]) break;
      at[d] = 0;
    }
  }
  return true;
}

tessera_status store_read(void* ctx, const tessera_tensor_slice* s, float* out) {
  const auto it = store_of(ctx)->tensors.find(s->name);
  if (it == store_of(ctx)->tensors.end()) return TESSERA_ERR_INVALID_ARGUMENT;
  const std::vector<int64_t> shape(s->shape, s->shape + s->ndim);
  if (shape != it->second.shape) return TESSERA_ERR_INVALID_ARGUMENT;
  std::vector<size_t> indices;
  if (!store_slice_indices(s, shape, indices)) return TESSERA_ERR_INVALID_ARGUMENT;
  for (size_t i = 0; i < indices.size(); ++i) out[i] = it->second.values[indices[i]];
  return TESSERA_OK;
}

tessera_status store_write(void* ctx, const tessera_tensor_slice* s, const float* data) {
  FakeStore* store = store_of(ctx);
  FakeStore::Tensor& t = store->tensors[s->name];
  t.shape.assign(s->shape, s->shape + s->ndim);
  const auto numel = static_cast<size_t>(std::accumulate(
      t.shape.begin(), t.shape.end(), int64_t{1}, [](int64_t a, int64_t b) { return a * b; }));
  t.values.resize(numel, 0.0F);
  std::vector<size_t> indices;
  if (!store_slice_indices(s, t.shape, indices)) return TESSERA_ERR_INVALID_ARGUMENT;
  for (size_t i = 0; i < indices.size(); ++i) t.values[indices[i]] = data[i];
  std::string what = std::string(s->name) + "@";
  if (s->box_offset == nullptr) {
    what += std::to_string(s->offset) + "+" + std::to_string(s->count);
  } else {
    what += "[";
    for (int32_t d = 0; d < s->ndim; ++d) {
      what += (d == 0 ? "" : ",") + std::to_string(s->box_offset[d]) + ":" +
              std::to_string(s->box_offset[d] + s->box_extent[d]);
    }
    what += "]";
  }
  store->writes.push_back(std::move(what));
  return TESSERA_OK;
}

}  // namespace

tessera_state_reader FakeStore::reader() noexcept {
  return tessera_state_reader{sizeof(tessera_state_reader), 0, this, &store_has, &store_read};
}

tessera_state_writer FakeStore::writer(uint32_t flags) noexcept {
  return tessera_state_writer{sizeof(tessera_state_writer), flags, this, &store_write, 0};
}

}  // namespace tessera::test

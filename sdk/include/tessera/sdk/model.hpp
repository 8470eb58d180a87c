// Header-only C++ SDK for model plugins (the model interface, c/model.h).
//
// A model author writes units (derived from tessera::sdk::model::Unit), a factory
// that builds them from the [model] options, and one registration line:
//
//   namespace sdk = tessera::sdk;
//   std::unique_ptr<sdk::model::Model> make_mine(const sdk::Host& host,
//                                                const sdk::Options& opts) {
//     std::vector<std::unique_ptr<sdk::model::Unit>> units = ...;
//     return std::make_unique<sdk::model::Model>("mine", std::move(units),
//                                                sdk::model::DataSpec::sequences(32, 256));
//   }
//   TESSERA_REGISTER_MODEL(make_mine, "mine", "0.1.0", "My model", kMineOptions)
//
// A unit never owns parameters: it declares them (ParamSpec) and works on
// buffers the caller hands it, one pointer per declared parameter in
// declaration order. Activations it keeps for backward live in a
// UnitContext the caller creates per micro-batch. The micro-batch is
// host-owned; the adapter reads it through the host's accessors into a
// BatchView before each call. See docs/sdk.md, "Writing a model".
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/c/model.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/intra_op.hpp"
#include "tessera/sdk/plugin.hpp"

namespace tessera::sdk::model {

// How tensor parallelism may split a parameter, in terms of its storage:
// `column` splits the last dimension (for a weight [in, out] used as x·W:
// the output features), `row` the first (for [in, out] the input features;
// for a [vocab, d] table the vocabulary). A 1-D tensor marked `column`
// follows the column split of its layer's weight.
enum class SplitHint { none, column, row };

// Name of a split hint ("none", "column", "row").
inline const char* split_hint_name(SplitHint hint) noexcept {
  switch (hint) {
    case SplitHint::column:
      return "column";
    case SplitHint::row:
      return "row";
    default:
      return "none";
  }
}

// One declared parameter tensor. `tied_to` is empty for a parameter the unit
// owns; otherwise it names another unit's parameter as "<unit>.<param>"
// (same shape) whose buffer the caller passes in this slot, with that
// parameter's gradient buffer as the gradient; gradients of both uses add
// up. `split_blocks` > 1 says the split dimension is that many equal blocks
// side by side (fused q|k|v: 3), each split separately.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  SplitHint split = SplitHint::none;
  std::string tied_to;
  int32_t split_blocks = 1;

  // Number of elements (product of the shape).
  [[nodiscard]] int64_t numel() const noexcept {
    int64_t n = 1;
    for (const int64_t d : shape) n *= d;
    return n;
  }
};

// A read-only row-major f32 matrix [rows, cols] owned by someone else.
struct ConstView {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  [[nodiscard]] bool empty() const noexcept { return data == nullptr; }
};

// One micro-batch as a unit reads it, borrowed from the host:
//  * sequences: `tokens` and `targets` int32 [size, seq_len];
//  * features:  `inputs` f32 [size, features], `targets` int32 [size].
struct BatchView {
  int64_t size = 0;      // examples
  int64_t seq_len = 0;   // tokens per example; 0 for feature data
  int64_t features = 0;  // values per example; 0 for sequence data
  std::span<const int32_t> tokens;
  std::span<const int32_t> targets;
  std::span<const float> inputs;

  [[nodiscard]] bool is_sequence() const noexcept { return seq_len > 0; }

  // Reads `batch` through the host's accessors (host ABI 1.3).
  static BatchView read(const tessera_host_api* host, const tessera_batch* batch) {
    TESSERA_CHECK(host != nullptr &&
                      host->struct_size >= offsetof(tessera_host_api, batch_tensor) + sizeof(void*),
                  TESSERA_ERR_UNSUPPORTED, "the host has no batch accessors (needs host ABI 1.3)");
    BatchView view;
    if (batch == nullptr) return view;
    view.size = host->batch_examples(host->ctx, batch);
    const auto tensor = [&](const char* name, tessera_dtype dtype, tessera_tensor_view& out) {
      out = tessera_tensor_view{};
      out.struct_size = sizeof out;
      ::tessera::sdk::detail::check_host_call(
          Host(host), host->batch_tensor(host->ctx, batch, name, &out), "batch_tensor");
      TESSERA_CHECK(out.dtype == dtype, TESSERA_ERR_INVALID_ARGUMENT, "batch tensor '", name,
                    "' has dtype ", out.dtype, ", expected ", dtype);
    };
    const auto count = [](const tessera_tensor_view& v) {
      int64_t n = 1;
      for (int32_t d = 0; d < v.ndim && d < TESSERA_VIEW_MAX_DIMS; ++d) n *= v.shape[d];
      return static_cast<std::size_t>(n);
    };
    // Every batch has targets: [examples, seq_len] for sequences, [examples]
    // for feature data, which tells which other tensor to read.
    tessera_tensor_view v{};
    tensor("targets", TESSERA_I32, v);
    view.targets = {static_cast<const int32_t*>(v.data), count(v)};
    if (v.ndim == 2) {
      tensor("tokens", TESSERA_I32, v);
      view.tokens = {static_cast<const int32_t*>(v.data), count(v)};
      view.seq_len = v.shape[1];
    } else {
      tensor("features", TESSERA_F32, v);
      view.inputs = {static_cast<const float*>(v.data), count(v)};
      view.features = v.ndim == 2 ? v.shape[1] : 0;
    }
    return view;
  }
};

// Everything a unit's forward pass reads besides its parameters.
//  * batch: the micro-batch (the first unit reads tokens or inputs, the last
//    its targets);
//  * x: the previous unit's output (empty for the first unit);
//  * loss_scale: the last unit returns Σ per-example (or per-token) loss ×
//    loss_scale;
//  * tp: the tensor-parallel group, or null (whole parameters).
struct UnitInput {
  const BatchView* batch = nullptr;
  ConstView x;
  float loss_scale = 1.0f;
  const tessera_tp_group* tp = nullptr;
};

// Estimated cost of a unit per example (see tessera_unit_cost).
struct UnitCost {
  double forward_flops = 0.0;
  double backward_flops = 0.0;
  double activation_bytes = 0.0;
  double output_bytes = 0.0;               // model 2.2
  double split_activation_bytes = 0.0;     // model 2.2
  double sequence_activation_bytes = 0.0;  // model 2.2
};

// Per-micro-batch state of one unit: saved activations and output buffers.
// Views returned by forward/backward point into it and stay valid until the
// next call on the same context or its destruction.
class UnitContext {
 public:
  UnitContext() = default;
  UnitContext(const UnitContext&) = delete;
  UnitContext& operator=(const UnitContext&) = delete;
  virtual ~UnitContext() = default;
  // Bytes of memory the context holds (allocated capacity), for accounting.
  [[nodiscard]] virtual std::size_t bytes() const noexcept = 0;

  // The tensor-parallel group of the call running on this context (null:
  // none, whole parameters) and the host that made it. The adapter sets
  // both before every forward, backward, backward_input and backward_weight,
  // so each backward sees the group of its own call (forward also has it as
  // UnitInput::tp); a caller that runs units directly sets them itself. The
  // group is copied; its backend table and communicator stay borrowed from
  // the caller. The host, when known, lets a unit read the message of a
  // collective that failed (tessera_host_api.last_error).
  [[nodiscard]] const tessera_tp_group* tp() const noexcept { return has_tp_ ? &tp_ : nullptr; }
  [[nodiscard]] const tessera_host_api* host() const noexcept { return host_; }
  void set_tp(const tessera_tp_group* tp, const tessera_host_api* host = nullptr) noexcept {
    has_tp_ = tp != nullptr;
    tp_ = has_tp_ ? ::tessera::sdk::detail::copy_versioned(tp) : tessera_tp_group{};
    host_ = host;
  }

 private:
  tessera_tp_group tp_{};
  bool has_tp_ = false;
  const tessera_host_api* host_ = nullptr;
};

// One unit of a model. Units are immutable after construction and may be
// used from several threads at once with distinct contexts.
class Unit {
 public:
  Unit(const Unit&) = delete;
  Unit& operator=(const Unit&) = delete;
  virtual ~Unit() = default;

  // Name unique within its model ("embed", "block3", "head", "layer0").
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  // Parameter tensors in declaration order.
  [[nodiscard]] std::span<const ParamSpec> params() const noexcept { return specs_; }
  // Whether this unit consumes the batch's tokens/inputs (the first unit).
  [[nodiscard]] bool is_first() const noexcept { return first_; }
  // Whether this unit takes the targets and returns the loss (the last).
  [[nodiscard]] bool is_last() const noexcept { return last_; }

  // TESSERA_UNIT_* bits: what the unit can do beyond forward and backward.
  [[nodiscard]] virtual uint32_t flags() const noexcept { return 0; }
  // Before training: throws tessera::Error (invalid argument) naming the
  // model option (key and value) that a tensor-parallel group of `size`
  // ranks with `flags` (TESSERA_TP_*) cannot split. The default accepts
  // every group (the unit refuses in forward instead).
  virtual void check_tensor_parallel(int32_t /*size*/, uint32_t /*flags*/) const {}
  // Estimated cost per example.
  [[nodiscard]] virtual UnitCost cost() const { return {}; }

  // Writes initial values into every untied parameter (whole tensors): a
  // pure function of `seed`, the unit's name and each parameter's name.
  virtual void init(std::span<float* const> params, uint64_t seed) const = 0;

  // A fresh context for one micro-batch.
  [[nodiscard]] virtual std::unique_ptr<UnitContext> make_context() const = 0;

  // Forward pass: returns the output activations (for the last unit a 1×1
  // view holding the scaled loss) and saves what backward needs in `ctx`.
  // Throws tessera::Error (invalid argument) naming the unit for a wrong
  // parameter count, input shape, token id or target.
  virtual ConstView forward(UnitContext& ctx, std::span<const float* const> params,
                            const UnitInput& input) const = 0;

  // Backward pass for the last forward on `ctx`: ADDS the parameter
  // gradients into `grads` and returns the gradient of the input (empty for
  // the first unit). For the last unit `grad_output` is empty (gradient 1)
  // or 1×1 holding d(objective)/d(loss).
  virtual ConstView backward(UnitContext& ctx, std::span<const float* const> params,
                             std::span<float* const> grads, ConstView grad_output) const = 0;

  // The two halves of backward (units with TESSERA_UNIT_SPLIT_BACKWARD):
  // the input gradient first, then the parameter gradients.
  virtual ConstView backward_input(UnitContext& /*ctx*/, std::span<const float* const> /*params*/,
                                   ConstView /*grad_output*/) const {
    split_backward_unsupported();
  }
  virtual void backward_weight(UnitContext& /*ctx*/, std::span<const float* const> /*params*/,
                               std::span<float* const> /*grads*/) const {
    split_backward_unsupported();
  }

 protected:
  // A derived unit fills `specs_` in its constructor.
  Unit(std::string name, bool first, bool last)
      : name_(std::move(name)), first_(first), last_(last) {}

  std::string name_;
  std::vector<ParamSpec> specs_;

 private:
  [[noreturn]] void split_backward_unsupported() const {
    throw Error(TESSERA_ERR_UNSUPPORTED,
                ::tessera::detail::concat("unit '", name_,
                                          "' does not split its backward pass into input and "
                                          "weight halves"));
  }

  bool first_;
  bool last_;
};

// What a model reads from its micro-batches (see tessera_data_spec).
struct DataSpec {
  tessera_data_kind kind = TESSERA_DATA_SEQUENCES;
  int64_t seq_len = 0;
  int64_t vocab = 0;
  int64_t features = 0;
  int64_t classes = 0;

  static DataSpec sequences(int64_t seq_len, int64_t vocab) {
    return {TESSERA_DATA_SEQUENCES, seq_len, vocab, 0, 0};
  }
  static DataSpec classification(int64_t features, int64_t classes) {
    return {TESSERA_DATA_FEATURES, 0, 0, features, classes};
  }
};

// Where a parameter's storage lives: (unit index, parameter index).
struct ParamRef {
  std::size_t unit = 0;
  std::size_t param = 0;
  friend bool operator==(const ParamRef&, const ParamRef&) = default;
};

// Ordered units with tied parameters resolved. The first unit consumes the
// batch, the last returns the loss.
class Model {
 public:
  // Throws tessera::Error (invalid argument) naming the unit and parameter
  // when there are no units, the first/last flags are wrong, unit names
  // repeat, or a tie names a missing parameter, a tied one or one of
  // another shape.
  Model(std::string name, std::vector<std::unique_ptr<Unit>> units, DataSpec data)
      : name_(std::move(name)), units_(std::move(units)), data_(data) {
    const auto fail = [this](const std::string& what) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT, "model '" + name_ + "': " + what);
    };
    if (units_.empty()) fail("has no units");
    std::set<std::string> names;
    for (std::size_t i = 0; i < units_.size(); ++i) {
      const Unit& u = *units_[i];
      if (!names.insert(u.name()).second) fail("unit name '" + u.name() + "' repeats");
      if (u.is_first() != (i == 0)) fail("unit '" + u.name() + "' has a wrong first-unit flag");
      if (u.is_last() != (i + 1 == units_.size())) {
        fail("unit '" + u.name() + "' has a wrong last-unit flag");
      }
    }
    owners_.resize(units_.size());
    for (std::size_t i = 0; i < units_.size(); ++i) {
      const auto specs = units_[i]->params();
      for (std::size_t j = 0; j < specs.size(); ++j) {
        owners_[i].push_back(resolve(i, specs[j], j, fail));
      }
    }
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  virtual ~Model() = default;

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::size_t size() const noexcept { return units_.size(); }
  [[nodiscard]] const Unit& unit(std::size_t i) const { return *units_.at(i); }
  [[nodiscard]] const DataSpec& data_spec() const noexcept { return data_; }
  // Storage of parameter `param` of unit `unit` (itself unless tied).
  [[nodiscard]] ParamRef owner(std::size_t unit, std::size_t param) const {
    return owners_.at(unit).at(param);
  }
  // Elements of the untied parameters of `unit`.
  [[nodiscard]] int64_t unit_parameter_count(std::size_t unit) const {
    int64_t n = 0;
    for (const ParamSpec& s : units_.at(unit)->params()) {
      if (s.tied_to.empty()) n += s.numel();
    }
    return n;
  }
  // Number of distinct (untied) parameter elements.
  [[nodiscard]] int64_t parameter_count() const {
    int64_t n = 0;
    for (std::size_t u = 0; u < units_.size(); ++u) n += unit_parameter_count(u);
    return n;
  }

 private:
  template <typename Fail>
  ParamRef resolve(std::size_t i, const ParamSpec& spec, std::size_t j, const Fail& fail) const {
    if (spec.tied_to.empty()) return {i, j};
    const std::string where = "parameter '" + units_[i]->name() + "." + spec.name + "'";
    const auto dot = spec.tied_to.find('.');
    if (dot == std::string::npos) fail(where + " ties to '" + spec.tied_to + "' (no '.')");
    const std::string unit_name = spec.tied_to.substr(0, dot);
    const std::string param_name = spec.tied_to.substr(dot + 1);
    for (std::size_t k = 0; k < units_.size(); ++k) {
      if (units_[k]->name() != unit_name) continue;
      const auto other = units_[k]->params();
      for (std::size_t m = 0; m < other.size(); ++m) {
        if (other[m].name != param_name) continue;
        if (!other[m].tied_to.empty()) fail(where + " ties to a tied parameter");
        if (other[m].shape != spec.shape) fail(where + " ties to one of another shape");
        return {k, m};
      }
    }
    fail(where + " ties to missing '" + spec.tied_to + "'");
    return {i, j};
  }

  std::string name_;
  std::vector<std::unique_ptr<Unit>> units_;
  DataSpec data_;
  std::vector<std::vector<ParamRef>> owners_;
};

// Signature of a model factory for TESSERA_REGISTER_MODEL.
using ModelFactory = std::unique_ptr<Model> (*)(const Host& host, const Options& opts);

namespace detail {

// A built model as the host holds it: the model, its host table and the
// checkpoint names and shapes param_info hands out.
struct ModelHandle {
  const tessera_host_api* host = nullptr;
  std::unique_ptr<Model> model;
  std::vector<std::vector<std::string>> full_names;  // [unit][param], of the owner
};

// One unit's per-micro-batch context as the C side sees it.
struct UnitCtxHandle {
  const ModelHandle* model = nullptr;
  int32_t unit = 0;
  std::unique_ptr<UnitContext> ctx;
};

inline const ModelHandle& as_model(const tessera_model* m) {
  TESSERA_CHECK(m != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "model is NULL");
  return *reinterpret_cast<const ModelHandle*>(m);
}

inline const Unit& unit_at(const ModelHandle& h, int32_t unit) {
  TESSERA_CHECK(unit >= 0 && static_cast<std::size_t>(unit) < h.model->size(),
                TESSERA_ERR_INVALID_ARGUMENT, "model '", h.model->name(), "' has no unit ", unit,
                " (it has ", h.model->size(), ")");
  return h.model->unit(static_cast<std::size_t>(unit));
}

inline UnitCtxHandle& checked_ctx(const ModelHandle& h, int32_t unit, tessera_unit_ctx* ctx) {
  auto* c = reinterpret_cast<UnitCtxHandle*>(ctx);
  TESSERA_CHECK(c != nullptr && c->ctx != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                "unit context is NULL");
  TESSERA_CHECK(c->model == &h && c->unit == unit, TESSERA_ERR_INVALID_ARGUMENT,
                "the context was created for unit ", c->unit, " of ",
                c->model == &h ? "this model" : "another model", ", not unit ", unit, " ('",
                h.model->unit(static_cast<std::size_t>(unit)).name(), "')");
  return *c;
}

// Copies `value` into *out, whose struct_size the caller set: a caller built
// against a smaller struct gets the prefix it knows.
template <typename T>
void copy_out(const T& value, T* out) {
  TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "output is NULL");
  TESSERA_CHECK(out->struct_size >= sizeof(uint32_t), TESSERA_ERR_INVALID_ARGUMENT,
                "output struct_size ", out->struct_size, " is too small");
  const uint32_t size = out->struct_size < sizeof value ? out->struct_size : sizeof value;
  std::memcpy(out, &value, size);
  out->struct_size = size;
}

inline tessera_split_kind to_c(SplitHint hint) noexcept {
  switch (hint) {
    case SplitHint::column:
      return TESSERA_SPLIT_COLUMN;
    case SplitHint::row:
      return TESSERA_SPLIT_ROW;
    default:
      return TESSERA_SPLIT_REPLICATED;
  }
}

inline ConstView to_view(tessera_matrix m) noexcept { return {m.data, m.rows, m.cols}; }
inline tessera_matrix to_c(ConstView v) noexcept { return {v.data, v.rows, v.cols}; }

// The parts of a unit call a unit sees, checked against the unit.
struct CallParts {
  std::span<const float* const> params;
  std::span<float* const> grads;
  UnitInput input;
  BatchView batch;
};

inline void read_call(const ModelHandle& h, const Unit& u, const tessera_unit_call* call,
                      bool with_grads, CallParts& parts) {
  TESSERA_CHECK(call != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "unit call is NULL");
  const tessera_unit_call c = ::tessera::sdk::detail::copy_versioned(call);
  const std::size_t n = u.params().size();
  TESSERA_CHECK(c.params != nullptr || n == 0, TESSERA_ERR_INVALID_ARGUMENT,
                "parameter array is NULL (the unit has ", n, " parameters)");
  TESSERA_CHECK(!with_grads || c.grads != nullptr || n == 0, TESSERA_ERR_INVALID_ARGUMENT,
                "gradient array is NULL (the unit has ", n, " parameters)");
  if (c.tp != nullptr && c.tp->size > 1) {
    TESSERA_CHECK((u.flags() & TESSERA_UNIT_TENSOR_PARALLEL) != 0, TESSERA_ERR_UNSUPPORTED,
                  "unit '", u.name(), "' does not support tensor parallelism (group of ",
                  c.tp->size, " ranks)");
    TESSERA_CHECK((c.tp->flags & TESSERA_TP_SEQUENCE) == 0 ||
                      (u.flags() & TESSERA_UNIT_SEQUENCE_PARALLEL) != 0,
                  TESSERA_ERR_UNSUPPORTED, "unit '", u.name(),
                  "' does not support sequence parallelism (group of ", c.tp->size, " ranks)");
    TESSERA_CHECK(c.tp->rank >= 0 && c.tp->rank < c.tp->size && c.tp->backend != nullptr &&
                      c.tp->comm != nullptr,
                  TESSERA_ERR_INVALID_ARGUMENT, "tensor-parallel group of ", c.tp->size,
                  " ranks has rank ", c.tp->rank,
                  c.tp->backend == nullptr || c.tp->comm == nullptr ? " and no communicator" : "");
  }
  parts.params = {c.params, c.params != nullptr ? n : 0};
  if (with_grads) parts.grads = {c.grads, c.grads != nullptr ? n : 0};
  if (c.batch != nullptr) parts.batch = BatchView::read(h.host, c.batch);
  parts.input.batch = &parts.batch;
  parts.input.loss_scale = c.loss_scale;
  parts.input.tp = c.tp;
}

template <ModelFactory Factory>
struct ModelAdapter {
  static tessera_status create(const tessera_host_api* host, const tessera_options* opts,
                               tessera_model** out) noexcept {
    return ::tessera::sdk::detail::guard(host, [&] {
      TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "create: output is NULL");
      auto handle = std::make_unique<ModelHandle>();
      handle->host = host;
      handle->model = Factory(Host(host), Options(host, opts));
      TESSERA_CHECK(handle->model != nullptr, TESSERA_ERR_INTERNAL, "the factory built no model");
      const Model& m = *handle->model;
      handle->full_names.resize(m.size());
      for (std::size_t u = 0; u < m.size(); ++u) {
        for (std::size_t p = 0; p < m.unit(u).params().size(); ++p) {
          const ParamRef o = m.owner(u, p);
          handle->full_names[u].push_back(m.unit(o.unit).name() + "." +
                                          m.unit(o.unit).params()[o.param].name);
        }
      }
      *out = reinterpret_cast<tessera_model*>(handle.release());
    });
  }
  static void destroy(tessera_model* model) noexcept {
    delete reinterpret_cast<ModelHandle*>(model);
  }
  static const tessera_host_api* host_of(const tessera_model* model) noexcept {
    return model != nullptr ? reinterpret_cast<const ModelHandle*>(model)->host : nullptr;
  }
  // Runs `fn` for a call on `unit`; an error it throws comes back prefixed
  // with "model '<name>' unit '<unit>' <what>: ".
  template <typename Fn>
  static tessera_status unit_guard(const tessera_model* model, int32_t unit, const char* what,
                                   Fn&& fn) noexcept {
    return ::tessera::sdk::detail::guard(host_of(model), [&] {
      // The unit's kernels split their work over the rank's threads (the
      // host's value, the same for every rank of the process).
      intra_op::set_threads(intra_op::host_threads(host_of(model)));
      try {
        fn();
      } catch (const Error& e) {
        std::string prefix = "model";
        if (model != nullptr) {
          const Model& m = *as_model(model).model;
          prefix += " '" + m.name() + "'";
          const Unit* u = find_unit(model, unit);
          prefix += u != nullptr ? " unit '" + u->name() + "'" : " unit " + std::to_string(unit);
        }
        throw Error(e.status(), prefix + " " + what + ": " + e.what());
      }
    });
  }
  static tessera_status data_spec(const tessera_model* model, tessera_data_spec* out) noexcept {
    return ::tessera::sdk::detail::guard(host_of(model), [&] {
      const DataSpec& d = as_model(model).model->data_spec();
      tessera_data_spec spec{};
      spec.struct_size = sizeof spec;
      spec.kind = d.kind;
      spec.seq_len = d.seq_len;
      spec.vocab = d.vocab;
      spec.features = d.features;
      spec.classes = d.classes;
      copy_out(spec, out);
    });
  }
  static int32_t num_units(const tessera_model* model) noexcept {
    return model != nullptr ? static_cast<int32_t>(as_model(model).model->size()) : 0;
  }
  static const Unit* find_unit(const tessera_model* model, int32_t unit) noexcept {
    if (model == nullptr || unit < 0) return nullptr;
    const Model& m = *as_model(model).model;
    if (static_cast<std::size_t>(unit) >= m.size()) return nullptr;
    return &m.unit(static_cast<std::size_t>(unit));
  }
  static const char* unit_name(const tessera_model* model, int32_t unit) noexcept {
    const Unit* u = find_unit(model, unit);
    return u != nullptr ? u->name().c_str() : nullptr;
  }
  static uint32_t unit_flags(const tessera_model* model, int32_t unit) noexcept {
    const Unit* u = find_unit(model, unit);
    return u != nullptr ? u->flags() : 0;
  }
  static int32_t num_params(const tessera_model* model, int32_t unit) noexcept {
    const Unit* u = find_unit(model, unit);
    return u != nullptr ? static_cast<int32_t>(u->params().size()) : -1;
  }
  static tessera_status param_info(const tessera_model* model, int32_t unit, int32_t param,
                                   tessera_param_info* out) noexcept {
    return ::tessera::sdk::detail::guard(host_of(model), [&] {
      const ModelHandle& h = as_model(model);
      const Unit& u = unit_at(h, unit);
      const auto specs = u.params();
      TESSERA_CHECK(param >= 0 && static_cast<std::size_t>(param) < specs.size(),
                    TESSERA_ERR_INVALID_ARGUMENT, "unit '", u.name(), "' has no parameter ", param,
                    " (it has ", specs.size(), ")");
      const ParamSpec& spec = specs[static_cast<std::size_t>(param)];
      const ParamRef owner =
          h.model->owner(static_cast<std::size_t>(unit), static_cast<std::size_t>(param));
      const ParamSpec& owner_spec = h.model->unit(owner.unit).params()[owner.param];
      tessera_param_info info{};
      info.struct_size = sizeof info;
      info.split = to_c(spec.split);
      info.name = spec.name.c_str();
      info.full_name = h.full_names[owner.unit][owner.param].c_str();  // one string per name
      info.shape = owner_spec.shape.data();
      info.ndim = static_cast<int32_t>(owner_spec.shape.size());
      info.owner_unit = static_cast<int32_t>(owner.unit);
      info.owner_param = static_cast<int32_t>(owner.param);
      info.split_blocks = spec.split_blocks;
      info.numel = owner_spec.numel();
      copy_out(info, out);
    });
  }
  static tessera_status unit_cost(const tessera_model* model, int32_t unit,
                                  tessera_unit_cost* out) noexcept {
    return ::tessera::sdk::detail::guard(host_of(model), [&] {
      const ModelHandle& h = as_model(model);
      const UnitCost c = unit_at(h, unit).cost();
      tessera_unit_cost cost{};
      cost.struct_size = sizeof cost;
      cost.forward_flops = c.forward_flops;
      cost.backward_flops = c.backward_flops;
      cost.activation_bytes = c.activation_bytes;
      cost.output_bytes = c.output_bytes;
      cost.split_activation_bytes = c.split_activation_bytes;
      cost.sequence_activation_bytes = c.sequence_activation_bytes;
      cost.params = h.model->unit_parameter_count(static_cast<std::size_t>(unit));
      copy_out(cost, out);
    });
  }
  static tessera_status init_params(const tessera_model* model, int32_t unit, float* const* params,
                                    uint64_t seed) noexcept {
    return unit_guard(model, unit, "init", [&] {
      const Unit& u = unit_at(as_model(model), unit);
      const std::size_t n = u.params().size();
      TESSERA_CHECK(params != nullptr || n == 0, TESSERA_ERR_INVALID_ARGUMENT,
                    "parameter array is NULL (unit '", u.name(), "' has ", n, " parameters)");
      u.init(std::span<float* const>(params, params != nullptr ? n : 0), seed);
    });
  }
  static tessera_status context_create(const tessera_model* model, int32_t unit,
                                       tessera_unit_ctx** out) noexcept {
    return unit_guard(model, unit, "context_create", [&] {
      const ModelHandle& h = as_model(model);
      const Unit& u = unit_at(h, unit);
      TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "output is NULL");
      auto ctx = std::make_unique<UnitCtxHandle>();
      ctx->model = &h;
      ctx->unit = unit;
      ctx->ctx = u.make_context();
      *out = reinterpret_cast<tessera_unit_ctx*>(ctx.release());
    });
  }
  static void context_destroy(tessera_unit_ctx* ctx) noexcept {
    delete reinterpret_cast<UnitCtxHandle*>(ctx);
  }
  static uint64_t context_bytes(const tessera_unit_ctx* ctx) noexcept {
    const auto* c = reinterpret_cast<const UnitCtxHandle*>(ctx);
    return c != nullptr && c->ctx != nullptr ? static_cast<uint64_t>(c->ctx->bytes()) : 0;
  }
  static tessera_status forward(const tessera_model* model, int32_t unit, tessera_unit_ctx* ctx,
                                const tessera_unit_call* call, tessera_matrix x,
                                tessera_matrix* out) noexcept {
    return unit_guard(model, unit, "forward", [&] {
      const ModelHandle& h = as_model(model);
      const Unit& u = unit_at(h, unit);
      UnitCtxHandle& c = checked_ctx(h, unit, ctx);
      TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "output is NULL");
      CallParts parts;
      read_call(h, u, call, false, parts);
      c.ctx->set_tp(parts.input.tp, h.host);
      parts.input.x = to_view(x);
      *out = to_c(u.forward(*c.ctx, parts.params, parts.input));
    });
  }
  static tessera_status backward(const tessera_model* model, int32_t unit, tessera_unit_ctx* ctx,
                                 const tessera_unit_call* call, tessera_matrix grad_output,
                                 tessera_matrix* grad_input) noexcept {
    return unit_guard(model, unit, "backward", [&] {
      const ModelHandle& h = as_model(model);
      const Unit& u = unit_at(h, unit);
      UnitCtxHandle& c = checked_ctx(h, unit, ctx);
      TESSERA_CHECK(grad_input != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "output is NULL");
      CallParts parts;
      read_call(h, u, call, true, parts);
      c.ctx->set_tp(parts.input.tp, h.host);
      *grad_input = to_c(u.backward(*c.ctx, parts.params, parts.grads, to_view(grad_output)));
    });
  }
  static tessera_status backward_input(const tessera_model* model, int32_t unit,
                                       tessera_unit_ctx* ctx, const tessera_unit_call* call,
                                       tessera_matrix grad_output,
                                       tessera_matrix* grad_input) noexcept {
    return unit_guard(model, unit, "backward_input", [&] {
      const ModelHandle& h = as_model(model);
      const Unit& u = unit_at(h, unit);
      UnitCtxHandle& c = checked_ctx(h, unit, ctx);
      TESSERA_CHECK(grad_input != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "output is NULL");
      CallParts parts;
      read_call(h, u, call, false, parts);
      c.ctx->set_tp(parts.input.tp, h.host);
      *grad_input = to_c(u.backward_input(*c.ctx, parts.params, to_view(grad_output)));
    });
  }
  static tessera_status backward_weight(const tessera_model* model, int32_t unit,
                                        tessera_unit_ctx* ctx,
                                        const tessera_unit_call* call) noexcept {
    return unit_guard(model, unit, "backward_weight", [&] {
      const ModelHandle& h = as_model(model);
      const Unit& u = unit_at(h, unit);
      UnitCtxHandle& c = checked_ctx(h, unit, ctx);
      CallParts parts;
      read_call(h, u, call, true, parts);
      c.ctx->set_tp(parts.input.tp, h.host);
      u.backward_weight(*c.ctx, parts.params, parts.grads);
    });
  }

  static tessera_status check_tensor_parallel(const tessera_model* model, int32_t size,
                                              uint32_t flags) noexcept {
    return ::tessera::sdk::detail::guard(host_of(model), [&] {
      const ModelHandle& h = as_model(model);
      try {
        for (std::size_t u = 0; u < h.model->size(); ++u) {
          h.model->unit(u).check_tensor_parallel(size, flags);
        }
      } catch (const Error& e) {
        throw Error(e.status(), "model '" + h.model->name() + "': " + e.message());
      }
    });
  }

  static constexpr tessera_model_api table() noexcept {
    return tessera_model_api{sizeof(tessera_model_api),
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
                             &check_tensor_parallel};
  }
};

}  // namespace detail
}  // namespace tessera::sdk::model

// Registers the model built by `factory` (a ModelFactory) as the plugin
// `name_str`; `options` is a static array of tessera_option_decl (the keys
// of [model] besides `name` and `init`) or TESSERA_NO_OPTIONS. Once per
// library, at namespace scope.
#define TESSERA_REGISTER_MODEL(factory, name_str, version_str, summary_str, options)               \
  namespace {                                                                                      \
  constexpr tessera_model_api tessera_detail_model_api =                                           \
      ::tessera::sdk::model::detail::ModelAdapter<&(factory)>::table();                            \
  const tessera_plugin_descriptor tessera_detail_descriptor = TESSERA_DETAIL_DESCRIPTOR(           \
      TESSERA_KIND_MODEL, TESSERA_MODEL_API_MAJOR, TESSERA_MODEL_API_MINOR, name_str, version_str, \
      summary_str, options, &tessera_detail_model_api);                                            \
  }                                                                                                \
  TESSERA_DETAIL_DEFINE_ENTRY(tessera_detail_descriptor)

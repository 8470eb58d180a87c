// Header-only C++ SDK for strategy plugins.
//
// A strategy author derives from tessera::sdk::Strategy and writes one
// TESSERA_REGISTER_STRATEGY(...) line:
//
//   class MyStrategy : public tessera::sdk::Strategy {
//    public:
//     // Before any rank starts; throw Error(INVALID_ARGUMENT) to refuse.
//     static void check(const tessera::sdk::Host& host, const tessera::sdk::Options& opts,
//                       int32_t world_size);
//     MyStrategy(const tessera::sdk::Host& host, const tessera::sdk::Options& opts,
//                tessera::sdk::StrategyEnv& env);
//     tessera_strategy_layout layout() const override;
//     void load(const tessera::sdk::StateReader& reader) override;
//     tessera::sdk::StepResult step(const tessera::sdk::StepArgs& args) override;
//     void save(const tessera::sdk::StateWriter& writer) override;
//   };
//   TESSERA_REGISTER_STRATEGY(MyStrategy, "mine", "0.1.0", "My strategy", kMyOptions)
//
// The views below (ModelView, CommView, OptimizerView, StateReader/Writer)
// turn the host's C tables into C++ calls that throw tessera::Error with the
// host's message on failure. The training utilities built on them live in
// their own headers: flat_params.hpp (flat layout, shards, slot pointers),
// replicated_params.hpp, unit_runner.hpp (forward/backward with hooks),
// grad_buckets.hpp, flat_state.hpp (load/save by flat range), clip.hpp,
// comm_dtype.hpp and tracked_buffer.hpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/c/strategy.h"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/plugin.hpp"

namespace tessera::sdk {

namespace detail {
// Throws the host's message for a failed call into a host-implemented table.
inline void check_host_call(const Host& host, tessera_status status, const char* what) {
  if (status == TESSERA_OK) return;
  const tessera_host_api* api = host.raw();
  const char* msg = nullptr;
  if (api != nullptr &&
      api->struct_size >= offsetof(tessera_host_api, last_error) + sizeof(void*) &&
      api->last_error != nullptr) {
    msg = api->last_error(api->ctx);
  }
  throw Error(status,
              ::tessera::detail::concat(
                  what, ": ", (msg != nullptr && *msg != '\0') ? msg : status_name(status)));
}
}  // namespace detail

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

// One parameter slot of a unit (see tessera_param_info).
struct ParamInfo {
  std::string name;       // within the unit
  std::string full_name;  // "<unit>.<param>" of the owner; the checkpoint key
  std::vector<int64_t> shape;
  int64_t numel = 0;
  tessera_split_hint split = TESSERA_SPLIT_NONE;
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
  ModelView(const Host& host, const tessera_model_api* api, const tessera_model* model)
      : host_(host), api_(api), model_(model) {
    TESSERA_CHECK(api != nullptr && model != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                  "strategy environment has no model");
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
  tessera_matrix forward(int32_t unit, UnitContext& ctx, const float* const* params,
                         const tessera_batch* batch, tessera_matrix x, float loss_scale) const {
    tessera_matrix out{};
    detail::check_host_call(
        host_, api_->forward(model_, unit, ctx.raw(), params, batch, x, loss_scale, &out),
        "model forward");
    return out;
  }
  tessera_matrix backward(int32_t unit, UnitContext& ctx, const float* const* params,
                          float* const* grads, tessera_matrix grad_output) const {
    tessera_matrix grad_in{};
    detail::check_host_call(
        host_, api_->backward(model_, unit, ctx.raw(), params, grads, grad_output, &grad_in),
        "model backward");
    return grad_in;
  }

  [[nodiscard]] int64_t batch_examples(const tessera_batch* batch) const noexcept {
    return api_->batch_examples(batch);
  }
  [[nodiscard]] int64_t batch_tokens_per_example(const tessera_batch* batch) const noexcept {
    return api_->batch_tokens_per_example(batch);
  }

 private:
  struct Unit {
    std::string name;
    std::vector<ParamInfo> params;
  };
  Host host_;
  const tessera_model_api* api_;
  const tessera_model* model_;
  std::vector<Unit> units_;
};

// ---------------------------------------------------------------------------
// Communication
// ---------------------------------------------------------------------------

// Time blocked on communication and bytes sent, accumulated by a CommView.
struct CommStats {
  int64_t wait_ns = 0;
  int64_t bytes_sent = 0;
};

// A started non-blocking operation of a CommView. Must be waited on; the
// destructor waits (and swallows errors) only as a last resort.
class PendingOp {
 public:
  PendingOp() = default;
  PendingOp(const tessera_backend_api* api, tessera_work* work, CommStats* stats)
      : api_(api), work_(work), stats_(stats) {}
  PendingOp(PendingOp&& o) noexcept
      : api_(o.api_), work_(std::exchange(o.work_, nullptr)), stats_(o.stats_) {}
  PendingOp& operator=(PendingOp&& o) noexcept {
    if (this != &o) {
      drop();
      api_ = o.api_;
      work_ = std::exchange(o.work_, nullptr);
      stats_ = o.stats_;
    }
    return *this;
  }
  PendingOp(const PendingOp&) = delete;
  PendingOp& operator=(const PendingOp&) = delete;
  ~PendingOp() { drop(); }

  [[nodiscard]] bool pending() const noexcept { return work_ != nullptr; }

  // Blocks until done (time counted as communication wait); throws the
  // operation's error.
  void wait(const Host& host) {
    if (work_ == nullptr) return;
    const auto t0 = std::chrono::steady_clock::now();
    const tessera_status s = api_->work_wait(work_, -1);
    if (stats_ != nullptr) {
      stats_->wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - t0)
                             .count();
    }
    api_->work_free(work_);
    work_ = nullptr;
    detail::check_host_call(host, s, "wait");
  }

 private:
  void drop() noexcept {
    if (work_ != nullptr) {
      (void)api_->work_wait(work_, -1);
      api_->work_free(work_);
      work_ = nullptr;
    }
  }
  const tessera_backend_api* api_ = nullptr;
  tessera_work* work_ = nullptr;
  CommStats* stats_ = nullptr;
};

// A communicator as a strategy uses it: typed collectives on CPU f32 (or any
// dtype through tessera_buffer), with the time spent blocked and the bytes
// sent counted into stats(). Borrows the handle unless made by split().
class CommView {
 public:
  CommView(const Host& host, const tessera_backend_api* api, tessera_comm* comm, bool owned = false)
      : host_(host), api_(api), comm_(comm), owned_(owned) {
    TESSERA_CHECK(api != nullptr && comm != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                  "strategy environment has no communicator");
    rank_ = api_->comm_rank(comm_);
    size_ = api_->comm_size(comm_);
  }
  CommView(const CommView&) = delete;
  CommView& operator=(const CommView&) = delete;
  ~CommView() {
    if (owned_) api_->comm_destroy(comm_);
  }

  [[nodiscard]] int32_t rank() const noexcept { return rank_; }
  [[nodiscard]] int32_t size() const noexcept { return size_; }
  [[nodiscard]] CommStats& stats() noexcept { return stats_; }
  [[nodiscard]] tessera_comm* raw() const noexcept { return comm_; }

  // Collective split (see tessera_backend_api::comm_split); nullptr for color < 0.
  [[nodiscard]] std::unique_ptr<CommView> split(int32_t color, int32_t key) {
    tessera_comm* out = nullptr;
    wait_timed([&] { return api_->comm_split(comm_, color, key, &out); }, "comm_split");
    if (out == nullptr) return nullptr;
    return std::make_unique<CommView>(host_, api_, out, true);
  }

  // Runs `args` to completion (all of it counted as wait).
  void run(tessera_coll_args args) {
    args.struct_size = sizeof args;
    stats_.bytes_sent += bytes_sent(args);
    wait_timed([&] { return api_->post(comm_, &args, nullptr); }, coll_name(args.coll));
  }
  // Starts `args`; buffers must stay untouched until the op is waited on.
  [[nodiscard]] PendingOp start(tessera_coll_args args) {
    args.struct_size = sizeof args;
    stats_.bytes_sent += bytes_sent(args);
    tessera_work* work = nullptr;
    detail::check_host_call(host_, api_->post(comm_, &args, &work), coll_name(args.coll));
    return {api_, work, &stats_};
  }

  // Convenience forms over CPU buffers; `send == recv` means in place.
  static tessera_coll_args args(tessera_coll_type coll, tessera_buffer send, tessera_buffer recv,
                                tessera_reduce_op op = TESSERA_SUM, int32_t root = 0) noexcept {
    tessera_coll_args a{};
    a.struct_size = sizeof a;
    a.coll = coll;
    a.send = send;
    a.recv = recv;
    a.op = op;
    a.root = root;
    return a;
  }
  template <typename T>
  static tessera_buffer buffer(std::span<T> data) noexcept {
    using E = std::remove_const_t<T>;
    return tessera_buffer{const_cast<E*>(data.data()), data.size(),  // NOLINT
                          dtype_of<E>::value, tessera_device{TESSERA_DEVICE_CPU, 0}};
  }

  template <typename T>
  void allreduce(std::span<T> data, tessera_reduce_op op = TESSERA_SUM) {
    run(args(TESSERA_COLL_ALLREDUCE, buffer(data), buffer(data), op));
  }
  template <typename T>
  [[nodiscard]] PendingOp start_allreduce(std::span<T> data, tessera_reduce_op op = TESSERA_SUM) {
    return start(args(TESSERA_COLL_ALLREDUCE, buffer(data), buffer(data), op));
  }
  template <typename T>
  void broadcast(std::span<T> data, int32_t root) {
    run(args(TESSERA_COLL_BROADCAST, buffer(data), buffer(data), TESSERA_SUM, root));
  }
  // recv holds size() blocks of send.size() elements.
  template <typename T>
  void allgather(std::span<const T> send, std::span<T> recv) {
    run(args(TESSERA_COLL_ALLGATHER, buffer(send), buffer(recv)));
  }
  template <typename T>
  [[nodiscard]] PendingOp start_allgather(std::span<const T> send, std::span<T> recv) {
    return start(args(TESSERA_COLL_ALLGATHER, buffer(send), buffer(recv)));
  }
  // send holds size() blocks of recv.size() elements.
  template <typename T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv,
                      tessera_reduce_op op = TESSERA_SUM) {
    run(args(TESSERA_COLL_REDUCE_SCATTER, buffer(send), buffer(recv), op));
  }
  template <typename T>
  [[nodiscard]] PendingOp start_reduce_scatter(std::span<const T> send, std::span<T> recv,
                                               tessera_reduce_op op = TESSERA_SUM) {
    return start(args(TESSERA_COLL_REDUCE_SCATTER, buffer(send), buffer(recv), op));
  }
  void barrier() { run(args(TESSERA_COLL_BARRIER, {}, {})); }

  // Bytes one rank sends for `a` with the usual bandwidth-optimal algorithms
  // (ring allreduce 2(P-1)/P·n, allgather and reduce-scatter (P-1)/P of the
  // full buffer, broadcast/reduce (P-1)/P·n, send n). This is the volume
  // the ZeRO paper counts, independent of the backend's actual algorithm.
  [[nodiscard]] int64_t bytes_sent(const tessera_coll_args& a) const noexcept {
    const auto p = static_cast<int64_t>(size_);
    if (p <= 1 && a.coll != TESSERA_COLL_SEND) return 0;
    const auto el = static_cast<int64_t>(tessera_dtype_size(a.send.dtype));
    const auto n = static_cast<int64_t>(a.send.count) * el;
    const auto r = static_cast<int64_t>(a.recv.count) * el;
    switch (a.coll) {
      case TESSERA_COLL_ALLREDUCE:
        return 2 * (p - 1) * n / p;
      case TESSERA_COLL_ALLGATHER:
        return (p - 1) * r / p;
      case TESSERA_COLL_SEND:
        return n;
      default:  // reduce_scatter (n: the full buffer), broadcast, reduce, ...
        return (p - 1) * n / p;
    }
  }

 private:
  template <typename Fn>
  void wait_timed(Fn&& fn, const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    const tessera_status s = fn();
    stats_.wait_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    detail::check_host_call(host_, s, what);
  }
  static const char* coll_name(tessera_coll_type c) noexcept {
    static const char* const kNames[] = {"allreduce",      "broadcast", "reduce",  "allgather",
                                         "reduce_scatter", "gather",    "scatter", "alltoall",
                                         "barrier",        "send",      "recv"};
    return c >= 0 && c < TESSERA_COLL_TYPE_COUNT ? kNames[c] : "collective";
  }

  Host host_;
  const tessera_backend_api* api_;
  tessera_comm* comm_;
  bool owned_;
  int32_t rank_ = 0;
  int32_t size_ = 1;
  CommStats stats_;
};

// ---------------------------------------------------------------------------
// Optimizer
// ---------------------------------------------------------------------------

// Optimizer state of one flat range; destroys itself.
class OptimState {
 public:
  OptimState() = default;
  OptimState(const tessera_optimizer_api* api, tessera_optim_state* state, uint64_t elements,
             int32_t slots)
      : api_(api), state_(state), elements_(elements), slots_(slots) {}
  OptimState(OptimState&& o) noexcept
      : api_(o.api_),
        state_(std::exchange(o.state_, nullptr)),
        elements_(o.elements_),
        slots_(o.slots_) {}
  OptimState& operator=(OptimState&& o) noexcept {
    if (this != &o) {
      reset();
      api_ = o.api_;
      state_ = std::exchange(o.state_, nullptr);
      elements_ = o.elements_;
      slots_ = o.slots_;
    }
    return *this;
  }
  OptimState(const OptimState&) = delete;
  OptimState& operator=(const OptimState&) = delete;
  ~OptimState() { reset(); }

  [[nodiscard]] tessera_optim_state* raw() const noexcept { return state_; }
  [[nodiscard]] uint64_t elements() const noexcept { return elements_; }
  [[nodiscard]] int32_t slots() const noexcept { return slots_; }
  // Values of slot `k` (elements() of them).
  [[nodiscard]] std::span<float> slot(int32_t k) const {
    TESSERA_CHECK(k >= 0 && k < slots_, TESSERA_ERR_INVALID_ARGUMENT, "optimizer slot ", k,
                  " out of range");
    return {api_->state_slot(state_, k), static_cast<size_t>(elements_)};
  }
  void reset() noexcept {
    if (state_ != nullptr) api_->state_destroy(state_);
    state_ = nullptr;
  }

 private:
  const tessera_optimizer_api* api_ = nullptr;
  tessera_optim_state* state_ = nullptr;
  uint64_t elements_ = 0;
  int32_t slots_ = 0;
};

class OptimizerView {
 public:
  OptimizerView(const Host& host, const tessera_optimizer_api* api, const tessera_optimizer* opt)
      : host_(host), api_(api), opt_(opt) {
    TESSERA_CHECK(api != nullptr && opt != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                  "strategy environment has no optimizer");
  }
  [[nodiscard]] std::string name() const { return api_->name(opt_); }
  [[nodiscard]] int32_t num_slots() const noexcept { return api_->num_slots(opt_); }
  [[nodiscard]] std::string slot_name(int32_t k) const {
    const char* s = api_->slot_name(opt_, k);
    return s != nullptr ? s : "";
  }
  [[nodiscard]] OptimState make_state(uint64_t elements) const {
    tessera_optim_state* st = nullptr;
    detail::check_host_call(host_, api_->state_create(opt_, elements, &st),
                            "optimizer state_create");
    return {api_, st, elements, num_slots()};
  }
  // Updates params[0, n) using state elements [state_offset, state_offset + n).
  void step(OptimState& state, uint64_t state_offset, std::span<float> params,
            std::span<const float> grads, int64_t step, float lr) const {
    TESSERA_CHECK(params.size() == grads.size(), TESSERA_ERR_INVALID_ARGUMENT,
                  "optimizer step: ", params.size(), " parameters but ", grads.size(),
                  " gradients");
    detail::check_host_call(host_,
                            api_->step(opt_, state.raw(), state_offset, params.data(), grads.data(),
                                       params.size(), step, lr),
                            "optimizer step");
  }

 private:
  Host host_;
  const tessera_optimizer_api* api_;
  const tessera_optimizer* opt_;
};

// ---------------------------------------------------------------------------
// Checkpoint state
// ---------------------------------------------------------------------------

// Checkpoint name of a parameter and of one of its optimizer slots.
inline std::string param_key(const std::string& full_name) { return full_name; }
inline std::string optim_key(const std::string& full_name, const std::string& slot) {
  return "optim." + full_name + "." + slot;
}

// A slice description borrowing `name` and `shape`.
inline tessera_tensor_slice make_slice(const std::string& name, std::span<const int64_t> shape,
                                       uint64_t offset, uint64_t count) noexcept {
  tessera_tensor_slice s{};
  s.struct_size = sizeof s;
  s.ndim = static_cast<int32_t>(shape.size());
  s.name = name.c_str();
  s.shape = shape.data();
  s.offset = offset;
  s.count = count;
  return s;
}

class StateReader {
 public:
  StateReader(const Host& host, const tessera_state_reader* r) : host_(host), r_(r) {}
  [[nodiscard]] bool has(const std::string& name) const {
    return r_->has(r_->ctx, name.c_str()) != 0;
  }
  // Elements [offset, offset + out.size()) of tensor `name` of full `shape`.
  void read(const std::string& name, std::span<const int64_t> shape, uint64_t offset,
            std::span<float> out) const {
    const auto s = make_slice(name, shape, offset, out.size());
    detail::check_host_call(host_, r_->read(r_->ctx, &s, out.data()), "state read");
  }

 private:
  Host host_;
  const tessera_state_reader* r_;
};

class StateWriter {
 public:
  StateWriter(const Host& host, const tessera_state_writer* w) : host_(host), w_(w) {}
  // True when every rank must write all it holds, replicas included
  // (TESSERA_STATE_ALL_REPLICAS); false: each element once across the world.
  [[nodiscard]] bool all_replicas() const noexcept {
    return (w_->flags & TESSERA_STATE_ALL_REPLICAS) != 0;
  }
  void write(const std::string& name, std::span<const int64_t> shape, uint64_t offset,
             std::span<const float> data) const {
    const auto s = make_slice(name, shape, offset, data.size());
    detail::check_host_call(host_, w_->write(w_->ctx, &s, data.data()), "state write");
  }

 private:
  Host host_;
  const tessera_state_writer* w_;
};

// ---------------------------------------------------------------------------
// The strategy
// ---------------------------------------------------------------------------

// C++ view of tessera_strategy_env.
class StrategyEnv {
 public:
  StrategyEnv(const Host& host, const tessera_strategy_env& env)
      : rank_(env.rank),
        world_size_(env.world_size),
        model_(host, env.model_api, env.model),
        world_(host, env.backend, env.world),
        optimizer_(host, env.optim_api, env.optimizer) {}
  StrategyEnv(const StrategyEnv&) = delete;
  StrategyEnv& operator=(const StrategyEnv&) = delete;

  [[nodiscard]] int32_t rank() const noexcept { return rank_; }
  [[nodiscard]] int32_t world_size() const noexcept { return world_size_; }
  [[nodiscard]] const ModelView& model() const noexcept { return model_; }
  [[nodiscard]] CommView& world() noexcept { return world_; }
  [[nodiscard]] const OptimizerView& optimizer() const noexcept { return optimizer_; }

 private:
  int32_t rank_;
  int32_t world_size_;
  ModelView model_;
  CommView world_;
  OptimizerView optimizer_;
};

// C++ view of tessera_step_args.
struct StepArgs {
  int64_t step = 1;
  float lr = 0.0f;
  double max_grad_norm = 0.0;
  std::span<const tessera_batch* const> micro_batches;
  std::span<const float> loss_scales;
};

// See tessera_step_result.
struct StepResult {
  double loss = 0.0;
  double grad_norm = 0.0;
  int64_t comm_wait_ns = 0;
  int64_t comm_bytes = 0;
};

class Strategy {
 public:
  Strategy() = default;
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;
  virtual ~Strategy() = default;

  // Data-parallel position of this rank (default: every rank its own slice).
  [[nodiscard]] virtual tessera_strategy_layout layout() const = 0;
  virtual void load(const StateReader& reader) = 0;
  virtual StepResult step(const StepArgs& args) = 0;
  virtual void save(const StateWriter& writer) = 0;
};

namespace detail {

struct StrategyHandle {
  const tessera_host_api* host;
  std::unique_ptr<StrategyEnv> env;
  std::unique_ptr<Strategy> impl;
};
inline StrategyHandle* as_handle(tessera_strategy* s) {
  return reinterpret_cast<StrategyHandle*>(s);
}

template <typename S>
struct StrategyAdapter {
  static tessera_status check(const tessera_host_api* host, const tessera_options* opts,
                              int32_t world_size) noexcept {
    return guard(host, [&] { S::check(Host(host), Options(host, opts), world_size); });
  }
  static tessera_status create(const tessera_host_api* host, const tessera_options* opts,
                               const tessera_strategy_env* env, tessera_strategy** out,
                               tessera_strategy_layout* layout) noexcept {
    return guard(host, [&] {
      TESSERA_CHECK(env != nullptr && out != nullptr && layout != nullptr,
                    TESSERA_ERR_INVALID_ARGUMENT, "create: null argument");
      const auto e = copy_versioned(env);
      const Host h(host);
      auto handle = std::make_unique<StrategyHandle>();
      handle->host = host;
      handle->env = std::make_unique<StrategyEnv>(h, e);
      handle->impl = std::make_unique<S>(h, Options(host, opts), *handle->env);
      const tessera_strategy_layout l = handle->impl->layout();
      std::memcpy(layout, &l, std::min<size_t>(layout->struct_size, sizeof l));
      *out = reinterpret_cast<tessera_strategy*>(handle.release());
    });
  }
  static void destroy(tessera_strategy* s) noexcept { delete as_handle(s); }

  static tessera_status load(tessera_strategy* s, const tessera_state_reader* reader) noexcept {
    auto* h = as_handle(s);
    return guard(h->host, [&] {
      TESSERA_CHECK(reader != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "load: null reader");
      h->impl->load(StateReader(Host(h->host), reader));
    });
  }
  static tessera_status step(tessera_strategy* s, const tessera_step_args* args,
                             tessera_step_result* result) noexcept {
    auto* h = as_handle(s);
    return guard(h->host, [&] {
      TESSERA_CHECK(args != nullptr && result != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                    "step: null argument");
      const auto a = copy_versioned(args);
      TESSERA_CHECK(a.num_micro >= 1 && a.micro_batches != nullptr && a.loss_scales != nullptr,
                    TESSERA_ERR_INVALID_ARGUMENT, "step: no micro-batches");
      StepArgs sa;
      sa.step = a.step;
      sa.lr = a.lr;
      sa.max_grad_norm = a.max_grad_norm;
      sa.micro_batches = {a.micro_batches, static_cast<size_t>(a.num_micro)};
      sa.loss_scales = {a.loss_scales, static_cast<size_t>(a.num_micro)};
      const StepResult r = h->impl->step(sa);
      tessera_step_result cr{};
      cr.struct_size = sizeof cr;
      cr.loss = r.loss;
      cr.grad_norm = r.grad_norm;
      cr.comm_wait_ns = r.comm_wait_ns;
      cr.comm_bytes = r.comm_bytes;
      const uint32_t size = result->struct_size;
      std::memcpy(result, &cr, std::min<size_t>(size, sizeof cr));
      result->struct_size = size;
    });
  }
  static tessera_status save(tessera_strategy* s, const tessera_state_writer* writer) noexcept {
    auto* h = as_handle(s);
    return guard(h->host, [&] {
      TESSERA_CHECK(writer != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "save: null writer");
      h->impl->save(StateWriter(Host(h->host), writer));
    });
  }

  static constexpr tessera_strategy_api table() noexcept {
    return tessera_strategy_api{
        sizeof(tessera_strategy_api), 0, &check, &create, &destroy, &load, &step, &save};
  }
};

}  // namespace detail
}  // namespace tessera::sdk

// Registers strategy class `cls` as the plugin `name_str`; `options` is a
// static array of tessera_option_decl or TESSERA_NO_OPTIONS. Once per library.
#define TESSERA_REGISTER_STRATEGY(cls, name_str, version_str, summary_str, options) \
  namespace {                                                                       \
  constexpr tessera_strategy_api tessera_detail_strategy_api =                      \
      ::tessera::sdk::detail::StrategyAdapter<cls>::table();                        \
  const tessera_plugin_descriptor tessera_detail_descriptor = {                     \
      sizeof(tessera_plugin_descriptor),                                            \
      TESSERA_ABI_MAJOR,                                                            \
      TESSERA_ABI_MINOR,                                                            \
      TESSERA_KIND_STRATEGY,                                                        \
      0,                                                                            \
      name_str,                                                                     \
      version_str,                                                                  \
      summary_str,                                                                  \
      TESSERA_DETAIL_OPTIONS_PTR(options),                                          \
      TESSERA_DETAIL_OPTIONS_COUNT(options),                                        \
      0,                                                                            \
      &tessera_detail_strategy_api};                                                \
  }                                                                                 \
  TESSERA_DETAIL_DEFINE_ENTRY(tessera_detail_descriptor)

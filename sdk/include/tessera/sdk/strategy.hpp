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
//     // Optional (strategy 2.3): what it would need and send, for selection.
//     static tessera::sdk::Estimate estimate(const tessera::sdk::Host& host,
//                                            const tessera::sdk::Options& opts,
//                                            const tessera::sdk::EstimateArgs& args);
//   };
//   TESSERA_REGISTER_STRATEGY(MyStrategy, "mine", "0.1.0", "My strategy", kMyOptions)
//
// The views of the host's C tables, which turn them into C++ calls that
// throw tessera::Error with the host's message on failure, have one header
// each: model_view.hpp (ModelView), comm_view.hpp (CommView),
// optimizer_view.hpp (OptimizerView) and state_io.hpp (StateReader/Writer);
// this header includes them all. The training utilities built on them live in
// their own headers: step_frame.hpp (the skeleton of step(): run_step),
// flat_params.hpp (flat layout, shards, slot pointers), replicated_params.hpp,
// unit_runner.hpp (forward/backward with hooks), grad_buckets.hpp,
// flat_state.hpp (load/save by flat range), clip.hpp, comm_dtype.hpp and
// tracked_buffer.hpp (docs/sdk.md lists every header).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "tessera/c/strategy.h"
#include "tessera/sdk/comm_view.hpp"
#include "tessera/sdk/compressor.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/model_view.hpp"
#include "tessera/sdk/optimizer_view.hpp"
#include "tessera/sdk/plugin.hpp"
#include "tessera/sdk/state_io.hpp"

namespace tessera::sdk {

// C++ view of tessera_strategy_env.
class StrategyEnv {
 public:
  StrategyEnv(const Host& host, const tessera_strategy_env& env)
      : raw_(env),
        rank_(env.rank),
        world_size_(env.world_size),
        model_(host, env.model_api, env.model, env.model_api_major, env.model_api_minor),
        world_(host, env.backend, env.world),
        optimizer_(host, env.optim_api, env.optimizer),
        compressor_(host, env.compressor_api, env.compressor,
                    env.compressor_name != nullptr ? env.compressor_name : "") {}
  StrategyEnv(const StrategyEnv&) = delete;
  StrategyEnv& operator=(const StrategyEnv&) = delete;

  [[nodiscard]] int32_t rank() const noexcept { return rank_; }
  [[nodiscard]] int32_t world_size() const noexcept { return world_size_; }
  [[nodiscard]] const ModelView& model() const noexcept { return model_; }
  [[nodiscard]] CommView& world() noexcept { return world_; }
  [[nodiscard]] const OptimizerView& optimizer() const noexcept { return optimizer_; }
  // The gradient compressor of [compression] (false when there is none;
  // strategy 2.4). Asking for it is what tells the SDK the strategy uses
  // it: a strategy given a compressor it never asked for fails `create`.
  [[nodiscard]] const CompressorView& compressor() noexcept {
    compressor_asked_ = true;
    return compressor_;
  }
  // Whether there is a compressor the strategy did not ask for.
  [[nodiscard]] bool compressor_unused() const noexcept {
    return static_cast<bool>(compressor_) && !compressor_asked_;
  }
  // Whether this rank joins a running world (strategy 2.7; see `joining` in
  // tessera_strategy_env). Asking is what tells the SDK the strategy can
  // admit it: a joining rank whose strategy never asked fails `create`.
  [[nodiscard]] bool joining() noexcept {
    joining_asked_ = true;
    return raw_.joining != 0;
  }
  // Whether this rank joins and the strategy did not ask.
  [[nodiscard]] bool joining_unhandled() const noexcept {
    return raw_.joining != 0 && !joining_asked_;
  }
  // Micro-batches the host passes every step (data.micro_batches; strategy
  // 2.9), or 0 when the host is older and does not say: a strategy that
  // checks the count in its constructor must check it at each step too.
  [[nodiscard]] int64_t micro_batches() const noexcept { return raw_.micro_batches; }
  // The C struct this was made from (every field the host's version has),
  // for a strategy that creates another strategy plugin with it (elastic).
  [[nodiscard]] const tessera_strategy_env& c() const noexcept { return raw_; }

 private:
  tessera_strategy_env raw_;
  int32_t rank_;
  int32_t world_size_;
  ModelView model_;
  CommView world_;
  OptimizerView optimizer_;
  CompressorView compressor_;
  bool compressor_asked_ = false;
  bool joining_asked_ = false;
};

// C++ view of tessera_step_args.
//
// loss_scales make each rank's gradient its share of the global mean's
// gradient (summed over the data-parallel ranks it IS the global mean's):
// a strategy that updates from one rank's gradient without summing must
// rescale it (see tessera_step_args in c/strategy.h).
struct StepArgs {
  int64_t step = 1;
  float lr = 0.0f;
  double max_grad_norm = 0.0;
  std::span<const tessera_batch* const> micro_batches;
  std::span<const float> loss_scales;
  // Examples in this rank's micro-batches and in the step's global batch
  // (every data-parallel slice once); for sequence models the tokens of
  // those examples, 0 otherwise. All 0 when the host predates these fields
  // (its tessera_step_args is smaller).
  int64_t local_examples = 0;
  int64_t global_examples = 0;
  int64_t local_tokens = 0;
  int64_t global_tokens = 0;
  // Strategy 2.6: the loss scale of this step (1: none); loss_scales
  // include it. run_step (step_frame.hpp) unscales and skips by it.
  float grad_scale = 1.0f;
  // The host's arguments these were read from (every field the SDK knows,
  // the missing ones zero), e.g. to hand the step to another strategy
  // plugin whole (elastic). Valid during the call.
  const tessera_step_args* c = nullptr;
};

// See tessera_step_result.
struct StepResult {
  double loss = 0.0;
  double grad_norm = 0.0;
  int64_t comm_wait_ns = 0;
  int64_t comm_bytes = 0;
  double bubble = 0.0;          // pipelines: measured idle share, [0, 1]
  double bubble_formula = 0.0;  // pipelines: the schedule's ideal bubble
  double bubble_cpu = 0.0;      // pipelines: idle share on the schedule's CPU clock
  // Bytes the step would have sent without gradient compression (0: the
  // same as comm_bytes) and the compressor's time (strategy 2.4).
  int64_t comm_bytes_raw = 0;
  int64_t compress_ns = 0;
  // Of comm_bytes, those sent across nodes by a hierarchical reduction
  // (strategy 2.4; 0 without one).
  int64_t comm_bytes_cross_node = 0;
  // Strategy 2.6: the scaled gradients overflowed and nothing was updated.
  bool skipped = false;
  // Strategy 2.5, elastic recovery: see tessera_step_result.
  bool world_changed = false;
  int32_t lost_ranks = 0;
  int64_t restored_step = 0;
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
  // A refusal is an answer to the user's options and world size: its
  // message goes to the host without TESSERA_CHECK's source location (an
  // INTERNAL error keeps it).
  static tessera_status check(const tessera_host_api* host, const tessera_options* opts,
                              int32_t world_size) noexcept {
    return guard(
        host, [&] { S::check(Host(host), Options(host, opts), world_size); }, ErrorText::kForUser);
  }
  static tessera_status create(const tessera_host_api* host, const tessera_options* opts,
                               const tessera_strategy_env* env, tessera_strategy** out,
                               tessera_strategy_layout* layout) noexcept {
    // A refusal of the configuration (the options, the compressor) reads
    // as such; internal errors keep their source location.
    return guard(
        host,
        [&] {
          TESSERA_CHECK(env != nullptr && out != nullptr && layout != nullptr,
                        TESSERA_ERR_INVALID_ARGUMENT, "create: null argument");
          const auto e = copy_versioned(env);
          const Host h(host);
          auto handle = std::make_unique<StrategyHandle>();
          handle->host = host;
          handle->env = std::make_unique<StrategyEnv>(h, e);
          handle->impl = std::make_unique<S>(h, Options(host, opts), *handle->env);
          TESSERA_CHECK(!handle->env->compressor_unused(), TESSERA_ERR_INVALID_ARGUMENT,
                        "this strategy takes no gradient compressor ([compression] name = '",
                        handle->env->compressor().name(), "'); remove [compression]");
          TESSERA_CHECK(!handle->env->joining_unhandled(), TESSERA_ERR_INVALID_ARGUMENT,
                        "this strategy cannot admit a rank into a running world (TESSERA_JOIN=1): "
                        "joining needs the elastic strategy");
          const tessera_strategy_layout l = handle->impl->layout();
          std::memcpy(layout, &l, std::min<size_t>(layout->struct_size, sizeof l));
          *out = reinterpret_cast<tessera_strategy*>(handle.release());
        },
        ErrorText::kForUser);
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
      sa.local_examples = a.local_examples;  // 0 from a host without them (copy_versioned)
      sa.global_examples = a.global_examples;
      sa.local_tokens = a.local_tokens;
      sa.global_tokens = a.global_tokens;
      sa.grad_scale = a.grad_scale > 0.0f ? a.grad_scale : 1.0f;  // 0 before 2.6
      sa.c = &a;
      const StepResult r = h->impl->step(sa);
      tessera_step_result cr{};
      cr.struct_size = sizeof cr;
      cr.skipped = r.skipped ? 1U : 0U;
      cr.loss = r.loss;
      cr.grad_norm = r.grad_norm;
      cr.comm_wait_ns = r.comm_wait_ns;
      cr.comm_bytes = r.comm_bytes;
      cr.bubble = r.bubble;
      cr.bubble_formula = r.bubble_formula;
      cr.bubble_cpu = r.bubble_cpu;
      // 0: a strategy that does not meter compression sent what it sent.
      cr.comm_bytes_raw = r.comm_bytes_raw != 0 ? r.comm_bytes_raw : r.comm_bytes;
      cr.compress_ns = r.compress_ns;
      cr.comm_bytes_cross_node = r.comm_bytes_cross_node;
      cr.world_changed = r.world_changed ? 1 : 0;
      cr.lost_ranks = r.lost_ranks;
      cr.restored_step = r.restored_step;
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

  // Strategy 2.3, for classes with a static estimate(Host, Options,
  // EstimateArgs) returning Estimate (see estimate.hpp).
  static constexpr bool kEstimates =
      requires(const Host& h, const Options& o, const EstimateArgs& a) {
    { S::estimate(h, o, a) } -> std::same_as<Estimate>;
  };
  static tessera_status estimate(const tessera_host_api* host, const tessera_options* opts,
                                 const tessera_estimate_args* args,
                                 tessera_estimate* out) noexcept {
    return guard(
        host,
        [&] {
          TESSERA_CHECK(args != nullptr && out != nullptr && args->model != nullptr,
                        TESSERA_ERR_INVALID_ARGUMENT, "estimate: null argument");
          const auto a = copy_versioned(args);
          const Host h(host);
          EstimateArgs ea;
          ea.world_size = a.world_size;
          ea.ranks_per_node = std::max(a.ranks_per_node, 1);
          ea.model = ModelDesc(h, *a.model);
          if (a.compression > 0) ea.compression = static_cast<CompressKind>(a.compression - 1);
          if constexpr (requires { S::kCompressors; }) {
            check_compressor_use(S::kCompressors, ea.compression);
          }
          if constexpr (kEstimates) {
            const tessera_estimate e = S::estimate(h, Options(host, opts), ea).to_c();
            const uint32_t size = out->struct_size;
            std::memcpy(out, &e, std::min<size_t>(size, sizeof e));
            out->struct_size = size;
          }
        },
        ErrorText::kForUser);
  }

  // Strategy 2.5: a strategy whose world can change (elastic) has
  // `tessera_strategy_world world()`, valid after a step that returned
  // world_changed.
  static constexpr bool kChangesWorld = requires(S & s) {
    { s.world() } -> std::same_as<tessera_strategy_world>;
  };
  static tessera_status world(tessera_strategy* s, tessera_strategy_world* out) noexcept {
    auto* h = as_handle(s);
    return guard(h->host, [&] {
      TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "world: null output");
      if constexpr (kChangesWorld) {
        const tessera_strategy_world w = dynamic_cast<S&>(*h->impl).world();
        const uint32_t size = out->struct_size;
        std::memcpy(out, &w, std::min<size_t>(size, sizeof w));
        out->struct_size = size;
      }
    });
  }

  static constexpr tessera_strategy_api table() noexcept {
    return tessera_strategy_api{sizeof(tessera_strategy_api),
                                0,
                                &check,
                                &create,
                                &destroy,
                                &load,
                                &step,
                                &save,
                                kEstimates ? &estimate : nullptr,
                                kChangesWorld ? &world : nullptr};
  }
};

}  // namespace detail
}  // namespace tessera::sdk

// Registers strategy class `cls` as the plugin `name_str`; `options` is a
// static array of tessera_option_decl or TESSERA_NO_OPTIONS. Once per library.
#define TESSERA_REGISTER_STRATEGY(cls, name_str, version_str, summary_str, options)            \
  namespace {                                                                                  \
  constexpr tessera_strategy_api tessera_detail_strategy_api =                                 \
      ::tessera::sdk::detail::StrategyAdapter<cls>::table();                                   \
  const tessera_plugin_descriptor tessera_detail_descriptor = TESSERA_DETAIL_DESCRIPTOR(       \
      TESSERA_KIND_STRATEGY, TESSERA_STRATEGY_API_MAJOR, TESSERA_STRATEGY_API_MINOR, name_str, \
      version_str, summary_str, options, &tessera_detail_strategy_api);                        \
  }                                                                                            \
  TESSERA_DETAIL_DEFINE_ENTRY(tessera_detail_descriptor)

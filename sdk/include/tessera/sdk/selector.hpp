// Header-only C++ SDK for strategy selectors (selector interface 1.0).
//
// A selector author writes a class with one static function and registers
// it:
//
//   struct MySelector {
//     static void select(const tessera::sdk::Host& host, const tessera::sdk::Options& opts,
//                        tessera::sdk::SelectEnv& env);
//   };
//   TESSERA_REGISTER_SELECTOR(MySelector, "mine", "0.1.0", "My selector", kMyOptions)
//
// select() proposes candidates, estimates them with env.estimate(), reports
// each with env.report() (best first, exactly one with `chosen`), and
// throws Error(INVALID_ARGUMENT) when nothing can be chosen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/c/selector.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/plugin.hpp"

namespace tessera::sdk {

// One row of a selector's ranking (tessera_selection_row).
struct SelectionRow {
  std::string strategy;
  std::string options;  // "key = value, key = value" ("" for the defaults)
  std::optional<tessera_estimate> estimate;
  bool fits = false;
  bool chosen = false;
  double step_seconds = -1.0;
  double compute_seconds = 0.0;
  double comm_seconds = 0.0;
  double bubble_seconds = 0.0;
  std::optional<double> measured_seconds;
  std::string reason;
};

// The outcome of estimating one candidate: the estimate, or the reason the
// strategy refused (its own message).
struct CandidateEstimate {
  std::optional<tessera_estimate> estimate;
  std::string refusal;
};

// The host's measured compute rate of the model.
struct ComputeRate {
  double flops_per_second = 0.0;
  double update_seconds_per_element = 0.0;  // optimizer update and gradient zeroing
  std::string source;
};

// A trial's measurement.
struct TrialResult {
  double seconds_per_step = 0.0;
  int64_t peak_bytes = 0;
};

class SelectEnv {
 public:
  SelectEnv(const Host& host, const tessera_select_env& env)
      : host_(host), env_(env), model_(host, *env.model) {
    strategies_.assign(env.strategies, env.strategies + std::max(env.num_strategies, 0));
  }

  [[nodiscard]] int32_t world_size() const noexcept { return env_.world_size; }
  [[nodiscard]] int32_t ranks_per_node() const noexcept { return std::max(env_.ranks_per_node, 1); }
  [[nodiscard]] int64_t memory_budget() const noexcept { return env_.memory_budget; }
  [[nodiscard]] const char* budget_source() const noexcept {
    return env_.budget_source != nullptr ? env_.budget_source : "";
  }
  [[nodiscard]] const ModelDesc& model() const noexcept { return model_; }
  [[nodiscard]] const tessera_model_desc& raw_model() const noexcept { return *env_.model; }
  [[nodiscard]] std::span<const tessera_strategy_info> strategies() const noexcept {
    return strategies_;
  }
  // The installed strategy `name`, or nullptr.
  [[nodiscard]] const tessera_strategy_info* strategy(const std::string& name) const noexcept {
    for (const auto& s : strategies_) {
      if (name == s.name) return &s;
    }
    return nullptr;
  }

  // The strategy's estimate of the candidate, or its refusal.
  [[nodiscard]] CandidateEstimate estimate(const std::string& strategy,
                                           const std::string& options) const {
    tessera_estimate e{};
    e.struct_size = sizeof e;
    const tessera_status s = env_.estimate(env_.ctx, strategy.c_str(), options.c_str(), &e);
    if (s == TESSERA_OK) return {e, {}};
    if (s != TESSERA_ERR_INVALID_ARGUMENT && s != TESSERA_ERR_UNSUPPORTED) {
      detail::check_host_call(host_, s, "estimate");
    }
    return {std::nullopt, last_error()};
  }

  // The backend's properties (the first call may probe the backend).
  [[nodiscard]] tessera_backend_props backend() const {
    tessera_backend_props p{};
    p.struct_size = sizeof p;
    detail::check_host_call(host_, env_.backend(env_.ctx, &p), "backend properties");
    return p;
  }

  // Runs `steps` steps of the candidate; std::nullopt with *why set when
  // the host cannot run trials here.
  [[nodiscard]] std::optional<TrialResult> trial(const std::string& strategy,
                                                 const std::string& options, int64_t steps,
                                                 std::string* why = nullptr) const {
    TrialResult r;
    const tessera_status s = env_.trial(env_.ctx, strategy.c_str(), options.c_str(), steps,
                                        &r.seconds_per_step, &r.peak_bytes);
    if (s == TESSERA_OK) return r;
    if (s != TESSERA_ERR_UNSUPPORTED) detail::check_host_call(host_, s, "trial");
    if (why != nullptr) *why = last_error();
    return std::nullopt;
  }

  // The host's measured FLOP rate of the model's own units on one thread
  // (see tessera_select_env.compute_rate), or std::nullopt with *why set
  // where the host has none.
  [[nodiscard]] std::optional<ComputeRate> compute_rate(std::string* why = nullptr) const {
    if (env_.struct_size < offsetof(tessera_select_env, compute_rate) + sizeof(void*) ||
        env_.compute_rate == nullptr) {
      if (why != nullptr) *why = "the host does not measure the model";
      return std::nullopt;
    }
    ComputeRate r;
    const char* source = nullptr;
    const tessera_status s =
        env_.compute_rate(env_.ctx, &r.flops_per_second, &r.update_seconds_per_element, &source);
    if (s == TESSERA_OK) {
      r.source = source != nullptr ? source : "";
      return r;
    }
    if (s != TESSERA_ERR_UNSUPPORTED) detail::check_host_call(host_, s, "compute rate");
    if (why != nullptr) *why = last_error();
    return std::nullopt;
  }

  void report(const SelectionRow& row) const {
    tessera_selection_row r{};
    r.struct_size = sizeof r;
    r.strategy = row.strategy.c_str();
    r.options = row.options.c_str();
    if (row.estimate) {
      r.estimate = *row.estimate;
      r.flags |= TESSERA_ROW_ESTIMATED;
    }
    if (row.fits) r.flags |= TESSERA_ROW_FITS;
    if (row.chosen) r.flags |= TESSERA_ROW_CHOSEN;
    r.step_seconds = row.step_seconds;
    r.compute_seconds = row.compute_seconds;
    r.comm_seconds = row.comm_seconds;
    r.bubble_seconds = row.bubble_seconds;
    if (row.measured_seconds) {
      r.measured_seconds = *row.measured_seconds;
      r.flags |= TESSERA_ROW_MEASURED;
    }
    r.reason = row.reason.c_str();
    env_.report(env_.ctx, &r);
  }

 private:
  [[nodiscard]] std::string last_error() const {
    const tessera_host_api* api = host_.raw();
    if (api == nullptr ||
        api->struct_size < offsetof(tessera_host_api, last_error) + sizeof(void*)) {
      return {};
    }
    const char* msg = api->last_error(api->ctx);
    return msg != nullptr ? msg : "";
  }

  Host host_;
  const tessera_select_env& env_;
  ModelDesc model_;
  std::vector<tessera_strategy_info> strategies_;
};

namespace detail {

template <typename S>
struct SelectorAdapter {
  static tessera_status select(const tessera_host_api* host, const tessera_options* opts,
                               const tessera_select_env* env) noexcept {
    return guard(
        host,
        [&] {
          TESSERA_CHECK(env != nullptr && env->model != nullptr && env->estimate != nullptr &&
                            env->report != nullptr,
                        TESSERA_ERR_INVALID_ARGUMENT, "select: incomplete environment");
          const Host h(host);
          SelectEnv e(h, *env);
          S::select(h, Options(host, opts), e);
        },
        ErrorText::kForUser);
  }
  static constexpr tessera_selector_api table() noexcept {
    return tessera_selector_api{sizeof(tessera_selector_api), 0, &select};
  }
};

}  // namespace detail
}  // namespace tessera::sdk

// Defines the exported entry point of a selector plugin. `options` is a
// static tessera_option_decl array or TESSERA_NO_OPTIONS.
#define TESSERA_REGISTER_SELECTOR(cls, name_str, version_str, summary_str, options)            \
  namespace {                                                                                  \
  constexpr tessera_selector_api tessera_detail_selector_api =                                 \
      ::tessera::sdk::detail::SelectorAdapter<cls>::table();                                   \
  const tessera_plugin_descriptor tessera_detail_descriptor = TESSERA_DETAIL_DESCRIPTOR(       \
      TESSERA_KIND_SELECTOR, TESSERA_SELECTOR_API_MAJOR, TESSERA_SELECTOR_API_MINOR, name_str, \
      version_str, summary_str, options, &tessera_detail_selector_api);                        \
  }                                                                                            \
  TESSERA_DETAIL_DEFINE_ENTRY(tessera_detail_descriptor)

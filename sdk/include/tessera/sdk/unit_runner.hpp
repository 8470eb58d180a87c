// Forward and backward passes over a model's units for the micro-batches of
// one step, with hooks a strategy uses to gather and free parameters per
// unit (ZeRO-3, FSDP) or to start gradient communication as soon as a
// unit's backward has finished (DDP buckets).
//
// For each micro-batch i in order: before_forward(u, i) then the forward of
// every unit u = 0..U-1, then before_backward(u, i), the backward of u and
// after_backward(u, i, last) for u = U-1..0. Gradients are ADDED into the
// gradient buffers, so the micro-batches of a step accumulate. The
// activations the units keep (one context per unit, reused by every
// micro-batch) are reported to the host as TESSERA_MEM_ACTIVATIONS while
// they are alive. By default the contexts stay alive between steps, so a
// step does not allocate and fault in its activation memory again;
// release() (or keep_contexts = false) frees them.
//
// With activation checkpointing every N units (the strategies'
// `activation_checkpointing` option), units N-1, 2N-1, ... (never the last)
// drop their contexts after the forward and run their forward again right
// before their backward, after before_backward (so a strategy that gathers
// parameters there gathers nothing more); the hooks see no extra call.
// See sdk::UnitContexts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/c/host.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/unit_contexts.hpp"

namespace tessera::sdk {

// Callbacks of UnitRunner::run. Each default does nothing. The runner reads
// a unit's parameter and gradient pointers AFTER calling the hook before it,
// so a hook may rebind them (SlotPointers::bind_entry) to freshly gathered
// storage. An exception thrown by a hook stops the run and propagates.
class RunnerHooks {
 public:
  RunnerHooks() = default;
  RunnerHooks(const RunnerHooks&) = default;
  RunnerHooks& operator=(const RunnerHooks&) = default;
  virtual ~RunnerHooks() = default;

  // Before unit `unit`'s forward on micro-batch `micro`.
  virtual void before_forward(int32_t /*unit*/, int32_t /*micro*/) {}
  // Before unit `unit`'s backward on micro-batch `micro`.
  virtual void before_backward(int32_t /*unit*/, int32_t /*micro*/) {}
  // After unit `unit`'s backward on micro-batch `micro`; `last_micro` is true
  // on the step's last micro-batch, when the gradients of every parameter
  // whose final_grad_unit() >= unit are complete for the step.
  virtual void after_backward(int32_t /*unit*/, int32_t /*micro*/, bool /*last_micro*/) {}
};

// Runs the units of one model for one rank. Not thread-safe; one per rank.
class UnitRunner {
 public:
  // `model` must outlive the runner; `rank` is the world rank the
  // activation bytes are reported for; with `keep_contexts` false every
  // run() frees its contexts before returning; `checkpoint_every` > 0
  // checkpoints every that many units (see the top of the file).
  UnitRunner(const Host& host, const ModelView& model, int32_t rank, bool keep_contexts = true,
             int64_t checkpoint_every = 0)
      : model_(&model),
        keep_contexts_(keep_contexts),
        contexts_(host, model, rank, 0, model.num_units(), checkpoint_every) {
    TESSERA_CHECK(model.num_units() >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                  "unit runner: the model has no units");
  }
  UnitRunner(const UnitRunner&) = delete;
  UnitRunner& operator=(const UnitRunner&) = delete;
  ~UnitRunner() = default;

  // Every unit call gets tensor-parallel group `tp` (null: whole
  // parameters); it must outlive the runs.
  void set_tp_group(const tessera_tp_group* tp) noexcept { tp_ = tp; }

  // Forward and backward of every micro-batch (see the top of the file).
  // `loss_scales[i]` is passed to the last unit's forward for micro-batch
  // i. Returns the sum over micro-batches of the last unit's scaled loss.
  // Throws tessera::Error (invalid argument) when the spans differ in length
  // or are empty, or when a unit runs with an unbound slot; errors of the
  // model and of the hooks propagate, and the contexts are released then.
  double run(std::span<const tessera_batch* const> micro_batches,
             std::span<const float> loss_scales, const SlotPointers& params,
             const SlotPointers& grads, RunnerHooks* hooks = nullptr) {
    TESSERA_CHECK(!micro_batches.empty() && micro_batches.size() == loss_scales.size(),
                  TESSERA_ERR_INVALID_ARGUMENT, "unit runner: ", micro_batches.size(),
                  " micro-batches but ", loss_scales.size(), " loss scales");
    RunnerHooks none;
    RunnerHooks& h = hooks != nullptr ? *hooks : none;
    const int32_t units = model_->num_units();
    const auto num_micro = static_cast<int32_t>(micro_batches.size());
    double loss = 0.0;
    try {
      for (int32_t m = 0; m < num_micro; ++m) {
        const tessera_batch* batch = micro_batches[static_cast<size_t>(m)];
        tessera_matrix x{};
        for (int32_t u = 0; u < units; ++u) {
          h.before_forward(u, m);
          check_bound(params, u, "parameters");
          x = contexts_.forward(u, params.unit_const(u), batch, x,
                                loss_scales[static_cast<size_t>(m)], tp_);
        }
        TESSERA_CHECK(x.data != nullptr && x.rows * x.cols == 1, TESSERA_ERR_INTERNAL,
                      "unit runner: the last unit '", model_->unit_name(units - 1), "' returned a ",
                      x.rows, "x", x.cols, " output, not the 1x1 loss");
        loss += static_cast<double>(x.data[0]);
        tessera_matrix grad{};
        for (int32_t u = units - 1; u >= 0; --u) {
          h.before_backward(u, m);
          check_bound(params, u, "parameters");
          check_bound(grads, u, "gradients");
          grad = contexts_.backward(u, params.unit_const(u), grads.unit(u), grad, tp_);
          h.after_backward(u, m, m == num_micro - 1);
        }
      }
    } catch (...) {
      release();
      throw;
    }
    if (!keep_contexts_) release();
    return loss;
  }

  // Destroys the contexts and reports their bytes as freed; the next run()
  // creates new ones.
  void release() noexcept { contexts_.release(); }

  // Activation bytes currently reported (held by the contexts and the
  // checkpointing copies).
  [[nodiscard]] int64_t activation_bytes() const noexcept { return contexts_.bytes(); }

 private:
  void check_bound(const SlotPointers& ptrs, int32_t u, const char* what) const {
    TESSERA_CHECK(ptrs.bound(u), TESSERA_ERR_INVALID_ARGUMENT, "unit runner: unit '",
                  model_->unit_name(u), "' has unbound ", what);
  }

  const ModelView* model_;
  bool keep_contexts_;
  UnitContexts contexts_;
  const tessera_tp_group* tp_ = nullptr;
};

}  // namespace tessera::sdk

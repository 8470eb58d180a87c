// The contexts (saved activations) of a contiguous range of a model's units
// for one micro-batch in flight, with activation checkpointing: the unit
// runner holds one for the whole model, a pipeline stage one per chunk and
// micro-batch slot. Every unit call goes through it; it creates the
// contexts on demand, reports their bytes to the host as
// TESSERA_MEM_ACTIVATIONS and keeps them between calls (and steps) until
// release().
//
// With checkpointing every N units (N >= 1), unit u of the range [first,
// end) is checkpointed when (u + 1) % N == 0 and u is not the range's last
// unit (the loss head, or the unit whose output a pipeline stage sends on):
// units N-1, 2N-1, ... A checkpointed unit's context is destroyed once its
// output has been consumed (after the next unit's forward), and its forward
// is run again into a fresh context right before its backward (after the
// caller's hooks for that backward), from the input it had:
//  * the range's input (the batch for the model's first unit, the
//    activations a pipeline stage received), kept by the caller;
//  * the previous unit's output, which lives in the previous unit's
//    context when that one is kept;
//  * a copy of it, when the previous unit is checkpointed too (taken right
//    after that unit's forward, before its context goes).
// The input gradient a checkpointed unit's backward returns is copied out
// before its context goes (one buffer, reused), except under a split
// backward, where the context lives on until the weight half. Units are
// deterministic, so the recomputed activations, and the results, are
// bit-identical to a run without checkpointing. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "tessera/c/host.h"
#include "tessera/c/model.h"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/model_view.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::sdk {

class UnitContexts {
 public:
  UnitContexts() = default;
  // Units [first, end) of `model` (which must outlive it), the bytes
  // reported for world rank `rank`, checkpointing every `every` units.
  UnitContexts(const Host& host, const ModelView& model, int32_t rank, int32_t first, int32_t end,
               int64_t every)
      : host_(host.raw()),
        model_(&model),
        rank_(rank),
        first_(first),
        end_(end),
        every_(every),
        contexts_(static_cast<size_t>(std::max(end - first, 0))),
        context_bytes_(contexts_.size(), 0),
        inputs_(contexts_.size()),
        stash_(contexts_.size()) {}
  UnitContexts(UnitContexts&& o) noexcept { *this = std::move(o); }
  UnitContexts& operator=(UnitContexts&& o) noexcept {
    if (this != &o) {
      release();
      host_ = o.host_;
      model_ = o.model_;
      rank_ = o.rank_;
      first_ = o.first_;
      end_ = o.end_;
      every_ = o.every_;
      contexts_ = std::move(o.contexts_);
      context_bytes_ = std::move(o.context_bytes_);
      inputs_ = std::move(o.inputs_);
      stash_ = std::move(o.stash_);
      grad_ = std::move(o.grad_);
      buffer_bytes_ = std::exchange(o.buffer_bytes_, 0);
      batch_ = o.batch_;
      loss_scale_ = o.loss_scale_;
      o.context_bytes_.assign(o.context_bytes_.size(), 0);
    }
    return *this;
  }
  UnitContexts(const UnitContexts&) = delete;
  UnitContexts& operator=(const UnitContexts&) = delete;
  ~UnitContexts() { release(); }

  [[nodiscard]] bool checkpointed(int32_t unit) const noexcept {
    return checkpointed_unit(every_, unit, end_);
  }

  // Unit `unit`'s forward on input `x` (see tessera_model_api::forward).
  // The units of the range run in order; the batch and loss scale of a
  // micro-batch are the same for all of them (a recompute uses them).
  tessera_matrix forward(int32_t unit, const float* const* params, const tessera_batch* batch,
                         tessera_matrix x, float loss_scale, const tessera_tp_group* tp) {
    const size_t k = index(unit);
    batch_ = batch;
    loss_scale_ = loss_scale;
    if (checkpointed(unit)) inputs_[k] = x;
    UnitContext& ctx = context(k, unit);
    tessera_matrix out = model_->forward(unit, ctx, params, batch, x, loss_scale, tp);
    account(k);
    // The previous unit's output has been consumed.
    if (k > 0 && checkpointed(unit - 1)) drop(k - 1);
    if (checkpointed(unit) && checkpointed(unit + 1)) {
      // The next unit is recomputed from this output: keep a copy of it and
      // let this context go now.
      std::vector<float>& copy = stash_[k + 1];
      copy.assign(out.data, out.data + out.rows * out.cols);
      account_buffers();
      out = tessera_matrix{copy.data(), out.rows, out.cols};
      drop(k);
    }
    return out;
  }

  // Unit `unit`'s backward (see tessera_model_api::backward); a
  // checkpointed unit's forward is run again first.
  tessera_matrix backward(int32_t unit, const float* const* params, float* const* grads,
                          tessera_matrix grad_output, const tessera_tp_group* tp) {
    const size_t k = index(unit);
    recompute(k, unit, params, tp);
    tessera_matrix grad = model_->backward(unit, contexts_[k], params, grads, grad_output, tp);
    account(k);
    if (checkpointed(unit)) {
      if (grad.data != nullptr) {
        grad_.assign(grad.data, grad.data + grad.rows * grad.cols);
        account_buffers();
        grad.data = grad_.data();
      }
      drop(k);
    }
    return grad;
  }

  // The input half of a split backward; a checkpointed unit's forward is
  // run again first, and its context lives until backward_weight.
  tessera_matrix backward_input(int32_t unit, const float* const* params,
                                tessera_matrix grad_output, const tessera_tp_group* tp) {
    const size_t k = index(unit);
    recompute(k, unit, params, tp);
    const tessera_matrix grad = model_->backward_input(unit, contexts_[k], params, grad_output, tp);
    account(k);
    return grad;
  }

  // The weight half of a split backward.
  void backward_weight(int32_t unit, const float* const* params, float* const* grads,
                       const tessera_tp_group* tp) {
    const size_t k = index(unit);
    model_->backward_weight(unit, contexts_[k], params, grads, tp);
    account(k);
    if (checkpointed(unit)) drop(k);
  }

  // Destroys every context and buffer and reports their bytes as freed.
  void release() noexcept {
    const int64_t held = bytes();
    for (UnitContext& c : contexts_) c.reset();
    context_bytes_.assign(context_bytes_.size(), 0);
    inputs_.assign(inputs_.size(), tessera_matrix{});
    for (std::vector<float>& s : stash_) std::vector<float>().swap(s);
    std::vector<float>().swap(grad_);
    buffer_bytes_ = 0;
    if (held != 0 && host_ != nullptr)
      Host(host_).track_memory(rank_, TESSERA_MEM_ACTIVATIONS, -held);
  }

  // Activation bytes reported now: the live contexts and the copies.
  [[nodiscard]] int64_t bytes() const noexcept {
    int64_t sum = buffer_bytes_;
    for (const int64_t b : context_bytes_) sum += b;
    return sum;
  }

 private:
  [[nodiscard]] size_t index(int32_t unit) const noexcept {
    return static_cast<size_t>(unit - first_);
  }

  UnitContext& context(size_t k, int32_t unit) {
    UnitContext& ctx = contexts_[k];
    if (ctx.raw() == nullptr) ctx = model_->make_context(unit);
    return ctx;
  }

  // A checkpointed unit's forward again, into a fresh context, from the
  // input its first forward had; its output is not needed.
  void recompute(size_t k, int32_t unit, const float* const* params, const tessera_tp_group* tp) {
    if (!checkpointed(unit)) return;
    drop(k);
    UnitContext& ctx = context(k, unit);
    (void)model_->forward(unit, ctx, params, batch_, inputs_[k], loss_scale_, tp);
    account(k);
  }

  // Destroys context k.
  void drop(size_t k) noexcept {
    contexts_[k].reset();
    account(k);
  }

  // Reports the change of context k's size since the last report.
  void account(size_t k) noexcept {
    const auto now = static_cast<int64_t>(contexts_[k].bytes());
    int64_t& before = context_bytes_[k];
    if (now != before) Host(host_).track_memory(rank_, TESSERA_MEM_ACTIVATIONS, now - before);
    before = now;
  }

  // Reports the change of the copies' capacity.
  void account_buffers() noexcept {
    int64_t now = static_cast<int64_t>(grad_.capacity() * sizeof(float));
    for (const std::vector<float>& s : stash_)
      now += static_cast<int64_t>(s.capacity() * sizeof(float));
    if (now != buffer_bytes_)
      Host(host_).track_memory(rank_, TESSERA_MEM_ACTIVATIONS, now - buffer_bytes_);
    buffer_bytes_ = now;
  }

  const tessera_host_api* host_ = nullptr;
  const ModelView* model_ = nullptr;
  int32_t rank_ = 0;
  int32_t first_ = 0;
  int32_t end_ = 0;
  int64_t every_ = 0;
  std::vector<UnitContext> contexts_;
  std::vector<int64_t> context_bytes_;  // reported, per context
  // Per checkpointed unit: the input of its forward (a view into the
  // caller's input, the previous context, or stash_), and per unit whose
  // predecessor is checkpointed too a copy of that predecessor's output.
  std::vector<tessera_matrix> inputs_;
  std::vector<std::vector<float>> stash_;
  std::vector<float> grad_;   // a checkpointed unit's input gradient
  int64_t buffer_bytes_ = 0;  // reported for stash_ and grad_
  const tessera_batch* batch_ = nullptr;
  float loss_scale_ = 1.0f;
};

}  // namespace tessera::sdk

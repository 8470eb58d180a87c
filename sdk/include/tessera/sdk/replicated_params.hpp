// A full copy of a model's parameters and gradients on one rank, as flat
// f32 buffers with the per-unit slot pointers into them: the storage of
// strategies that replicate parameters (none, ddp, zero1, zero2's
// parameters).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "tessera/c/host.h"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::sdk {

// Parameters (TESSERA_MEM_PARAMS) and, optionally, gradients
// (TESSERA_MEM_GRADS) of every owned parameter of `layout`, zeroed, with
// slot pointers for the units. `padding` zeroed elements follow the model's
// in both buffers (zero1 pads them to a multiple of the world size, so that
// its collectives run in place); they belong to no parameter. `layout` must
// outlive the object. Not movable: the slot pointers point into its
// buffers. Allocation failure throws std::bad_alloc.
class ReplicatedParams {
 public:
  ReplicatedParams(const Host& host, const FlatLayout& layout, int32_t rank, bool with_grads = true,
                   uint64_t padding = 0)
      : layout_(&layout),
        total_(static_cast<size_t>(layout.total())),
        params_(host, rank, TESSERA_MEM_PARAMS, static_cast<size_t>(layout.total() + padding)),
        grads_(host, rank, TESSERA_MEM_GRADS,
               with_grads ? static_cast<size_t>(layout.total() + padding) : 0),
        param_ptrs_(layout, params_.data()),
        grad_ptrs_(layout, with_grads ? grads_.data() : nullptr) {}
  ReplicatedParams(const ReplicatedParams&) = delete;
  ReplicatedParams& operator=(const ReplicatedParams&) = delete;

  [[nodiscard]] const FlatLayout& layout() const noexcept { return *layout_; }
  // All parameter values in flat order (the padding left out).
  [[nodiscard]] std::span<float> params() noexcept { return params_.span().first(total_); }
  [[nodiscard]] std::span<const float> params() const noexcept {
    return params_.span().first(total_);
  }
  // All gradients in flat order (empty without gradients; the padding left
  // out).
  [[nodiscard]] std::span<float> grads() noexcept {
    return grads_.span().first(std::min(total_, grads_.size()));
  }
  [[nodiscard]] std::span<const float> grads() const noexcept {
    return grads_.span().first(std::min(total_, grads_.size()));
  }
  // The parameters / gradients with the padding after them.
  [[nodiscard]] std::span<float> padded_params() noexcept { return params_.span(); }
  [[nodiscard]] std::span<float> padded_grads() noexcept { return grads_.span(); }
  // The slice of the parameters / gradients in flat `range`.
  [[nodiscard]] std::span<float> params(FlatRange range) noexcept {
    return params_.span().subspan(static_cast<size_t>(range.begin),
                                  static_cast<size_t>(range.size()));
  }
  [[nodiscard]] std::span<float> grads(FlatRange range) noexcept {
    return grads_.span().subspan(static_cast<size_t>(range.begin),
                                 static_cast<size_t>(range.size()));
  }
  // Slot pointers for the units' forward and backward.
  [[nodiscard]] const SlotPointers& param_ptrs() const noexcept { return param_ptrs_; }
  [[nodiscard]] const SlotPointers& grad_ptrs() const noexcept { return grad_ptrs_; }

  // Sets every gradient to zero (the start of a step).
  void zero_grads() { grads_.zero(); }

 private:
  const FlatLayout* layout_;
  size_t total_;  // elements of the model, the padding left out
  TrackedBuffer<float> params_;
  TrackedBuffer<float> grads_;
  SlotPointers param_ptrs_;
  SlotPointers grad_ptrs_;
};

}  // namespace tessera::sdk

// A full copy of a model's parameters and gradients on one rank, as flat
// f32 buffers with the per-unit slot pointers into them: the storage of
// strategies that replicate parameters (none, ddp, zero1, zero2's
// parameters).
#pragma once

#include <cstdint>
#include <span>

#include "tessera/c/host.h"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::sdk {

// Parameters (TESSERA_MEM_PARAMS) and, optionally, gradients
// (TESSERA_MEM_GRADS) of every owned parameter of `layout`, zeroed, with
// slot pointers for the units. `layout` must outlive the object. Not
// movable: the slot pointers point into its buffers. Allocation failure
// throws std::bad_alloc.
class ReplicatedParams {
 public:
  ReplicatedParams(const Host& host, const FlatLayout& layout, int32_t rank, bool with_grads = true)
      : layout_(&layout),
        params_(host, rank, TESSERA_MEM_PARAMS, static_cast<size_t>(layout.total())),
        grads_(host, rank, TESSERA_MEM_GRADS, with_grads ? static_cast<size_t>(layout.total()) : 0),
        param_ptrs_(layout, params_.data()),
        grad_ptrs_(layout, with_grads ? grads_.data() : nullptr) {}
  ReplicatedParams(const ReplicatedParams&) = delete;
  ReplicatedParams& operator=(const ReplicatedParams&) = delete;

  [[nodiscard]] const FlatLayout& layout() const noexcept { return *layout_; }
  // All parameter values in flat order.
  [[nodiscard]] std::span<float> params() noexcept { return params_.span(); }
  [[nodiscard]] std::span<const float> params() const noexcept { return params_.span(); }
  // All gradients in flat order (empty without gradients).
  [[nodiscard]] std::span<float> grads() noexcept { return grads_.span(); }
  [[nodiscard]] std::span<const float> grads() const noexcept { return grads_.span(); }
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
  void zero_grads() noexcept { grads_.zero(); }

 private:
  const FlatLayout* layout_;
  TrackedBuffer<float> params_;
  TrackedBuffer<float> grads_;
  SlotPointers param_ptrs_;
  SlotPointers grad_ptrs_;
};

}  // namespace tessera::sdk

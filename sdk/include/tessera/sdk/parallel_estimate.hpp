// Per-unit pieces of the estimates of the model-parallel strategies
// (tensor, pipeline, hybrid; estimate.hpp): what a rank of a
// tensor-parallel group of `tp` holds of a unit's parameters and of its
// context, what the unit's own collectives send in that group, and the
// refusals a strategy with a tensor axis shares (require_tensor_parallel's
// checks on a model description). Formulas: docs/strategies/tensor.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "tessera/c/model.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::sdk::parallel_estimate {

// Elements of the unit's own parameters one rank holds: its shard (1/tp)
// of the split tensors, the others whole.
[[nodiscard]] inline int64_t held_params(const tessera_unit_desc& u, int32_t tp) noexcept {
  const int64_t t = tp < 1 ? 1 : tp;
  return u.split_params / t + (u.params - u.split_params);
}

// Bytes one context of the unit holds for `examples` on a rank of a group
// of `tp` (model 2.2): the split share divided by tp, the sequence share
// too in sequence mode, the rest whole. A description without the 2.2
// shares (both 0) counts activation_bytes whole.
[[nodiscard]] inline int64_t context_bytes(const tessera_unit_desc& u, int64_t examples, int32_t tp,
                                           bool sequence) noexcept {
  const double t = tp < 1 ? 1.0 : static_cast<double>(tp);
  const double rest = u.activation_bytes - u.split_activation_bytes - u.sequence_activation_bytes;
  const double per = u.split_activation_bytes / t +
                     (sequence ? u.sequence_activation_bytes / t : u.sequence_activation_bytes) +
                     rest;
  return static_cast<int64_t>(std::llround(per * static_cast<double>(examples)));
}

// The activation bytes of sdk::UnitContexts over units [first, end) for one
// micro-batch of `examples` on a rank of a group of `tp`, checkpointing
// every `every` units (0: none; sdk::checkpointed_unit says which). With C_u
// the context of unit u (context_bytes) and I_u its input (the previous
// unit's output, 1/tp of its rows in sequence mode):
//  * held: what stays between micro-batches and steps: Σ C_u over the
//    units not checkpointed, I_u of every checkpointed unit whose
//    predecessor in the range is checkpointed too (the copy it recomputes
//    from), and the input-gradient buffer, max I_u over the checkpointed
//    units past the model's first;
//  * recompute: the largest C_u of a checkpointed unit (one at a time);
//  * checkpointed: Σ C_u over the checkpointed units (what a split
//    backward holds from its input half to its weight half).
// Without checkpointing held is Σ C_u and the others 0.
struct RangeActivations {
  int64_t held = 0;
  int64_t recompute = 0;
  int64_t checkpointed = 0;
};
[[nodiscard]] inline RangeActivations range_activations(const ModelDesc& model, int32_t first,
                                                        int32_t end, int64_t examples, int32_t tp,
                                                        bool sequence, int64_t every) {
  RangeActivations a;
  const auto ckpt = [&](int32_t u) { return checkpointed_unit(every, u, end); };
  const int64_t rows_div = sequence && tp > 1 ? tp : 1;
  const auto input = [&](int32_t u) {
    if (u == 0) return int64_t{0};
    const double out = model.unit(u - 1).output_bytes * static_cast<double>(examples);
    return static_cast<int64_t>(std::llround(out)) / rows_div;
  };
  int64_t grad_buffer = 0;
  for (int32_t u = first; u < end; ++u) {
    const int64_t c = context_bytes(model.unit(u), examples, tp, sequence);
    if (!ckpt(u)) {
      a.held += c;
      continue;
    }
    a.recompute = std::max(a.recompute, c);
    a.checkpointed += c;
    if (u > first && ckpt(u - 1)) a.held += input(u);
    grad_buffer = std::max(grad_buffer, input(u));
  }
  a.held += grad_buffer;
  return a;
}

// The FLOPs a checkpointed run adds over units [first, end) for
// `examples`: the forward of every checkpointed unit once more.
[[nodiscard]] inline double recompute_flops(const ModelDesc& model, int32_t first, int32_t end,
                                            int64_t every, double examples) {
  double f = 0.0;
  for (int32_t u = first; u < end; ++u) {
    if (checkpointed_unit(every, u, end)) f += model.unit(u).forward_flops;
  }
  return f * examples;
}

// Bytes a rank sends in a ring allreduce of `bytes` over `n` ranks, as
// CommView counts one call.
[[nodiscard]] inline int64_t allreduce(int64_t bytes, int64_t n) noexcept {
  return ring_allreduce_bytes(bytes, n);
}

// The unit's own collectives in a tensor group of `tp` for one micro-batch
// of `examples` (bytes a rank sends, and calls), by the Megatron layout of
// the in-tree transformers; sequence mode sends the same volume (each
// allreduce becomes an allgather plus a reduce-scatter):
//  - the first unit (a vocabulary-parallel embedding) sums its output once;
//  - the last unit (a vocabulary-parallel head) sums its input gradient
//    once and combines the cross-entropy's row maxima, sums and target
//    logits (3 values per token);
//  - every other unit is a block of two column/row pairs: two sums of its
//    output size forward and two backward.
// A unit that splits nothing (no split or tied parameters) sends nothing.
struct UnitTraffic {
  int64_t bytes = 0;
  int64_t messages = 0;
};
[[nodiscard]] inline UnitTraffic unit_traffic(const ModelDesc& model, int32_t unit,
                                              int64_t examples, int32_t tp) {
  UnitTraffic t;
  const tessera_unit_desc& u = model.unit(unit);
  if (tp <= 1 || (u.split_params == 0 && u.tied_params == 0)) return t;
  const auto whole = [&](double per_example) {
    return static_cast<int64_t>(std::llround(per_example * static_cast<double>(examples)));
  };
  const bool first = unit == 0;
  const bool last = unit == model.num_units() - 1;
  if (first) {
    t.bytes = allreduce(whole(u.output_bytes), tp);
    t.messages = 1;
  } else if (last) {
    const int64_t rows = examples * (model.seq_len() > 0 ? model.seq_len() : 1);
    t.bytes = allreduce(whole(model.unit(unit - 1).output_bytes), tp) + allreduce(4 * rows, tp) +
              allreduce(8 * rows, tp);
    t.messages = 3;
  } else {
    t.bytes = 4 * allreduce(whole(u.output_bytes), tp);
    t.messages = 4;
  }
  return t;
}

// The bytes the forward halves of a unit's own collectives send (what a
// checkpointed unit's recompute sends again), by unit_traffic's layout:
// a block's two sums of its output (in sequence mode two allgathers and
// two reduce-scatters), the first unit's sum of its output (in sequence
// mode its reduce-scatter, half of it); the last unit is never
// checkpointed.
[[nodiscard]] inline UnitTraffic forward_traffic(const ModelDesc& model, int32_t unit,
                                                 int64_t examples, int32_t tp, bool sequence) {
  UnitTraffic t = unit_traffic(model, unit, examples, tp);
  if (unit == 0) {
    if (sequence) t.bytes /= 2;
  } else if (unit != model.num_units() - 1) {
    t.bytes /= 2;
    t.messages /= 2;
  }
  return t;
}

// Refuses, as sdk::require_tensor_parallel does for a built model, a
// description whose units cannot split over `size` ranks (or not in
// sequence mode), then asks the built model, when the description has one
// (ModelDesc::check_tensor_parallel).
inline void require_tensor_parallel(const ModelDesc& model, int32_t size, bool sequence,
                                    std::string_view who, std::string_view option) {
  if (size <= 1) return;
  for (int32_t u = 0; u < model.num_units(); ++u) {
    const tessera_unit_desc& d = model.unit(u);
    const char* name = d.name != nullptr ? d.name : "?";
    TESSERA_CHECK((d.flags & TESSERA_UNIT_TENSOR_PARALLEL) != 0, TESSERA_ERR_INVALID_ARGUMENT, who,
                  ": unit '", name,
                  "' does not support tensor parallelism (no TESSERA_UNIT_TENSOR_PARALLEL), so ",
                  option, " = ", size, " cannot split it; use ", option,
                  " = 1 or another strategy");
    TESSERA_CHECK(!sequence || (d.flags & TESSERA_UNIT_SEQUENCE_PARALLEL) != 0,
                  TESSERA_ERR_INVALID_ARGUMENT, who, ": unit '", name,
                  "' does not support sequence parallelism (no TESSERA_UNIT_SEQUENCE_PARALLEL), "
                  "so mode = \"sequence\" cannot split its rows; use mode = \"tensor\"");
  }
  const uint32_t flags = sequence ? static_cast<uint32_t>(TESSERA_TP_SEQUENCE) : 0U;
  try {
    model.check_tensor_parallel(size, flags);
  } catch (const Error& e) {
    throw Error(e.status(),
                ::tessera::detail::concat(who, ": [strategy.options] ", option, " = ", size,
                                          ", mode = \"", sequence ? "sequence" : "tensor",
                                          "\" cannot split the model: ", e.what()));
  }
}

}  // namespace tessera::sdk::parallel_estimate

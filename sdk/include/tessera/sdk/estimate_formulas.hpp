// Estimate formulas of the data-parallel strategies (none, ddp, zero1,
// zero2, zero3, fsdp), shared so that each strategy's `estimate` predicts
// from one place what its SDK helpers allocate and send:
//
//   ReplicatedParams, OptimState      Ψ·4 bytes of parameters and
//                                     gradients, slots·n·4 of optimizer state
//   BucketReducer (ddp)               grad_bucket_sizes: the buckets of
//                                     plan_grad_buckets, from the unit sizes
//   ShardGrid (zero1)                 shard_grid_plan: the per-rank
//                                     lengths of plan_shard_buckets
//   UnitGather, UnitReducer (zero2,   ShardedUnits + simulate_sharded_step:
//   zero3, fsdp)                      the per-unit gathers and
//                                     reduce-scatters of one step replayed
//                                     over the unit sizes, giving the peak of
//                                     the communication buffers, the bytes
//                                     sent and the collective calls
//
// Bytes sent are counted as CommView::bytes_sent counts them: a ring
// allreduce of n bytes over P ranks 2(P-1)·n/P, an allgather or
// reduce-scatter of pieces of s bytes (P-1)·s.
//
// A description gives each unit's parameter count, not its tensors: where
// the tensors matter (ddp's bucket count, used only for the message count)
// a unit's parameters are taken as num_tensors equal tensors. A unit's tied
// slots are taken to use the parameters of the lowest other unit owning at
// least as many (the embedding a tied language-model head uses).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tessera/c/common.h"
#include "tessera/c/host.h"
#include "tessera/sdk/estimate.hpp"
#include "tessera/sdk/parallel_estimate.hpp"

namespace tessera::sdk {

// ceil(a / b) for a >= 0, b >= 1.
[[nodiscard]] inline int64_t ceil_div(int64_t a, int64_t b) noexcept { return (a + b - 1) / b; }

// Bytes of the ring allreduce of the f64 sum of squares of the gradient
// norm over `n` ranks.
[[nodiscard]] inline int64_t norm_allreduce_bytes(int64_t n) noexcept {
  return ring_allreduce_bytes(static_cast<int64_t>(sizeof(double)), n);
}

// The persistent state of a rank holding `param_elements` parameters,
// `grad_elements` gradients and optimizer state for `optim_elements`
// (f32, `slots` values per element).
inline void set_persistent(Estimate& e, int64_t param_elements, int64_t grad_elements,
                           int64_t optim_elements, int32_t slots) {
  e[TESSERA_MEM_PARAMS] = param_elements * 4;
  e[TESSERA_MEM_GRADS] = grad_elements * 4;
  e[TESSERA_MEM_OPTIMIZER] = optim_elements * 4 * slots;
}

// Activation bytes the unit runner holds at its peak: every unit's context
// after the forward and backward of one micro-batch of `examples` examples
// (model 2.2: activation_bytes counts what a context holds then; contexts
// are kept, so they stay at this size for the whole step and between
// steps): Σ_u activation_bytes_u · examples. With activation checkpointing
// every `every` units: what stays held plus the one recomputed context
// (parallel_estimate::range_activations; docs/strategies/README.md).
[[nodiscard]] inline int64_t activation_peak(const ModelDesc& model, int64_t examples,
                                             int64_t every = 0) {
  const parallel_estimate::RangeActivations a =
      parallel_estimate::range_activations(model, 0, model.num_units(), examples, 1, false, every);
  return a.held + a.recompute;
}

// The common part of a data-parallel estimate over `data_size` ranks:
// data size, activations of the largest micro-batch (checkpointing every
// `every` units) and the FLOPs of the largest slice (a checkpointed unit's
// forward counted twice).
inline Estimate data_parallel_estimate(const ModelDesc& model, int32_t data_size,
                                       int64_t every = 0) {
  Estimate e;
  e.data_size = data_size;
  e[TESSERA_MEM_ACTIVATIONS] = activation_peak(model, model.micro_examples(data_size), every);
  e.compute_flops =
      model.flops(0, model.num_units(), static_cast<double>(model.slice_examples(data_size))) +
      parallel_estimate::recompute_flops(model, 0, model.num_units(), every,
                                         static_cast<double>(model.slice_examples(data_size)));
  return e;
}

// Element counts of ddp's gradient buckets (plan_grad_buckets) with each
// unit's parameters taken as num_tensors equal tensors.
[[nodiscard]] inline std::vector<int64_t> grad_bucket_sizes(const ModelDesc& model,
                                                            uint64_t first_capacity,
                                                            uint64_t capacity) {
  std::vector<int64_t> tensors;  // flat order
  for (const auto& u : model.units()) {
    const int64_t k = std::max<int32_t>(u.num_tensors, u.params > 0 ? 1 : 0);
    for (int64_t t = 0; t < k; ++t) tensors.push_back(u.params / k + (t < u.params % k ? 1 : 0));
  }
  std::vector<int64_t> out;
  int64_t cur = 0;
  bool open = false;
  for (size_t k = tensors.size(); k-- > 0;) {
    const auto n = static_cast<uint64_t>(tensors[k]);
    const uint64_t cap = out.empty() ? first_capacity : capacity;
    if (open && n > 0 && cur > 0 && static_cast<uint64_t>(cur) + n > cap) {
      out.push_back(cur);
      open = false;
    }
    if (!open) {
      cur = 0;
      open = true;
    }
    cur += static_cast<int64_t>(n);
  }
  if (open && cur > 0) out.push_back(cur);
  return out;
}

// zero1's buckets: the per-rank lengths of the buckets of
// plan_shard_buckets over a shard of `shard` elements and `world` ranks.
struct ShardGridPlan {
  std::vector<int64_t> buckets;  // per-rank lengths, in plan order
};
[[nodiscard]] inline ShardGridPlan shard_grid_plan(int64_t shard, int32_t world,
                                                   uint64_t first_capacity, uint64_t capacity) {
  ShardGridPlan p;
  const auto w = static_cast<uint64_t>(std::max(world, 1));
  auto end = static_cast<uint64_t>(shard);
  while (end > 0) {
    const uint64_t cap = p.buckets.empty() ? first_capacity : capacity;
    const uint64_t len = std::min(end, std::max<uint64_t>(1, cap / w));
    p.buckets.push_back(static_cast<int64_t>(len));
    end -= len;
  }
  return p;
}

// The sharded units of zero2, zero3 and fsdp (sdk::UnitShardLayout) as a
// description gives them.
struct ShardedUnits {
  std::vector<int64_t> psi;                        // [sharded unit]: Ψ_g
  std::vector<std::vector<int32_t>> owners;        // [model unit]: sharded units it uses
  std::vector<std::vector<int32_t>> completed_at;  // [model unit]: gradients complete after it

  [[nodiscard]] int32_t num_units() const noexcept { return static_cast<int32_t>(psi.size()); }
  [[nodiscard]] int32_t model_units() const noexcept { return static_cast<int32_t>(owners.size()); }
  // Elements of sharded unit g's piece on each of `group` ranks.
  [[nodiscard]] int64_t piece(int32_t g, int32_t group) const {
    return ceil_div(psi.at(static_cast<size_t>(g)), group);
  }
  // Σ_g ceil(Ψ_g / group): a rank's parameter, gradient and optimizer shard.
  [[nodiscard]] int64_t shard_elements(int32_t group) const {
    int64_t n = 0;
    for (int32_t g = 0; g < num_units(); ++g) n += piece(g, group);
    return n;
  }
};

// One sharded unit per model unit, or (min_params >= 1, fsdp's wrap =
// "min_params") consecutive model units merged until they own at least
// min_params parameters (sdk::group_by_min_params).
[[nodiscard]] inline ShardedUnits sharded_units(const ModelDesc& model, int64_t min_params = 0) {
  ShardedUnits s;
  const int32_t models = model.num_units();
  std::vector<int32_t> group_of(static_cast<size_t>(models));
  int32_t group = 0;
  int64_t held = 0;
  for (int32_t m = 0; m < models; ++m) {
    group_of[static_cast<size_t>(m)] = group;
    if (static_cast<size_t>(group) == s.psi.size()) s.psi.push_back(0);
    s.psi.back() += model.unit(m).params;
    held += model.unit(m).params;
    if (held >= min_params && m + 1 < models) {
      ++group;
      held = 0;
    }
  }
  s.owners.resize(static_cast<size_t>(models));
  s.completed_at.resize(static_cast<size_t>(models));
  std::vector<int32_t> done(s.psi.size(), models);
  for (int32_t m = 0; m < models; ++m) {
    auto& o = s.owners[static_cast<size_t>(m)];
    const int32_t g = group_of[static_cast<size_t>(m)];
    done[static_cast<size_t>(g)] = std::min(done[static_cast<size_t>(g)], m);
    if (model.unit(m).num_tensors > 0 || model.unit(m).params > 0) o.push_back(g);
    const int32_t tied = model.tied_owner(m);
    if (tied >= 0) {
      const int32_t t = group_of[static_cast<size_t>(tied)];
      if (std::find(o.begin(), o.end(), t) == o.end()) o.push_back(t);
      done[static_cast<size_t>(t)] = std::min(done[static_cast<size_t>(t)], m);
    }
    std::sort(o.begin(), o.end());
  }
  for (int32_t g = 0; g < s.num_units(); ++g) {
    s.completed_at[static_cast<size_t>(done[static_cast<size_t>(g)])].push_back(g);
  }
  return s;
}

// How a sharded strategy gathers parameters and reduces gradients.
struct ShardedSchedule {
  enum class Gather {
    kReplicated,  // parameters whole on every rank (zero2; fsdp no_shard)
    kEachUse,     // gathered before each unit's forward and backward (zero3, full_shard)
    kForwardOnce  // gathered before the forward, kept until the unit's backward (shard_grad_op)
  };
  Gather gather = Gather::kEachUse;
  bool prefetch = true;
  // zero3 (its UnitReducer also on one rank): the unit ahead is the next
  // model unit, and without prefetch none is kept; fsdp: the next model
  // unit using another sharded unit, kept (not started) without prefetch.
  bool zero3_ahead = false;
  // zero2: every micro-batch's gradients are reduce-scattered (blocking
  // without overlap), and the updated parameters allgathered after the
  // optimizer.
  bool zero2 = false;
  bool blocking = false;
  int32_t group = 1;     // ranks per sharding group
  int32_t replicas = 1;  // groups (fsdp hybrid_shard, no_shard)
  tessera_dtype param_dtype = TESSERA_F32;
  tessera_dtype reduce_dtype = TESSERA_F32;
  int64_t micro_batches = 1;
};

// What one step of a sharded strategy sends and stages.
struct ShardedTraffic {
  int64_t comm_peak = 0;  // peak bytes of TESSERA_MEM_COMM
  int64_t bytes = 0;      // bytes sent, norm allreduce included
  int64_t messages = 0;   // collective calls
  int64_t allgathers = 0;
  int64_t reduce_scatters = 0;
};

namespace detail {

// Replays one step of UnitGather / UnitReducer use (see the strategies'
// runner hooks) over sizes only.
class ShardedStepModel {
 public:
  ShardedStepModel(const ShardedUnits& units, const ShardedSchedule& s)
      : u_(units),
        s_(s),
        gathered_(static_cast<size_t>(units.num_units()), 0),
        staged_(static_cast<size_t>(units.num_units()), 0),
        full_(static_cast<size_t>(units.num_units()), 0),
        pending_(static_cast<size_t>(units.num_units()), 0) {}

  ShardedTraffic run() {
    const int32_t models = u_.model_units();
    const bool gathers = s_.gather != ShardedSchedule::Gather::kReplicated;
    const bool each_use = s_.gather == ShardedSchedule::Gather::kEachUse;
    for (int64_t micro = 0; micro < s_.micro_batches; ++micro) {
      const bool last = micro + 1 == s_.micro_batches;
      for (int32_t m = 0; m < models && gathers; ++m) use(m, ahead(m, 1), each_use);
      for (int32_t m = models - 1; m >= 0; --m) {
        if (gathers) use(m, ahead(m, -1), each_use);
        if (has_reducer()) {
          for (const int32_t g : u_.owners[static_cast<size_t>(m)]) grads(g);
        }
        after_backward(m, last);
      }
    }
    if (has_reducer()) finish_all();
    for (int32_t g = 0; g < u_.num_units(); ++g) release(g);
    if (s_.group > 1) add(norm_allreduce_bytes(s_.group));
    if (s_.zero2 && s_.group > 1) gather_updated();
    return t_;
  }

 private:
  [[nodiscard]] int64_t piece(int32_t g) const { return u_.piece(g, s_.group); }
  [[nodiscard]] int64_t padded(int32_t g) const { return piece(g) * s_.group; }
  [[nodiscard]] bool wide_params() const { return s_.param_dtype == TESSERA_F32; }
  [[nodiscard]] bool wide_grads() const { return s_.reduce_dtype == TESSERA_F32; }
  // zero2 and zero3 always reduce through UnitReducer, fsdp over groups of
  // two or more.
  [[nodiscard]] bool has_reducer() const { return s_.group > 1 || s_.zero2 || s_.zero3_ahead; }
  [[nodiscard]] int64_t reduce_size() const {
    return static_cast<int64_t>(tessera_dtype_size(s_.reduce_dtype));
  }

  void grow(int64_t bytes) {
    comm_ += bytes;
    t_.comm_peak = std::max(t_.comm_peak, comm_);
  }
  void shrink(int64_t bytes) { comm_ -= bytes; }
  void add(int64_t bytes) {
    t_.bytes += bytes;
    ++t_.messages;
  }

  // The model unit whose sharded units are kept (and with prefetch
  // started) ahead of `m` in direction `dir`, or -1.
  [[nodiscard]] int32_t ahead(int32_t m, int32_t dir) const {
    const int32_t models = u_.model_units();
    if (s_.zero3_ahead) {
      const int32_t n = m + dir;
      return s_.prefetch && n >= 0 && n < models ? n : -1;
    }
    const auto& mine = u_.owners[static_cast<size_t>(m)];
    for (int32_t n = m + dir; n >= 0 && n < models; n += dir) {
      for (const int32_t o : u_.owners[static_cast<size_t>(n)]) {
        if (std::find(mine.begin(), mine.end(), o) == mine.end()) return n;
      }
    }
    return -1;
  }

  // UnitGather: start, ready, release, use.
  void start_gather(int32_t g) {
    int64_t& held = gathered_[static_cast<size_t>(g)];
    if (held != 0 || piece(g) == 0) return;
    held = padded(g) * 4;
    grow(held);
    if (s_.group == 1) return;
    ++t_.allgathers;
    if (wide_params()) {
      add(ring_piece_bytes(piece(g) * 4, s_.group));
      return;
    }
    const auto size = static_cast<int64_t>(tessera_dtype_size(s_.param_dtype));
    staged_[static_cast<size_t>(g)] = (piece(g) + padded(g)) * size;
    grow(staged_[static_cast<size_t>(g)]);
    add(ring_piece_bytes(piece(g) * size, s_.group));
  }
  void ready(int32_t g) {
    start_gather(g);
    shrink(staged_[static_cast<size_t>(g)]);
    staged_[static_cast<size_t>(g)] = 0;
  }
  void release(int32_t g) {
    shrink(gathered_[static_cast<size_t>(g)] + staged_[static_cast<size_t>(g)]);
    gathered_[static_cast<size_t>(g)] = 0;
    staged_[static_cast<size_t>(g)] = 0;
  }
  void use(int32_t m, int32_t next, bool free_others) {
    const auto& needed = u_.owners[static_cast<size_t>(m)];
    static const std::vector<int32_t> kNone;
    const auto& ahead = next >= 0 ? u_.owners[static_cast<size_t>(next)] : kNone;
    const auto in = [](const std::vector<int32_t>& v, int32_t o) {
      return std::find(v.begin(), v.end(), o) != v.end();
    };
    if (free_others) {
      for (int32_t g = 0; g < u_.num_units(); ++g) {
        if (gathered_[static_cast<size_t>(g)] != 0 && !in(needed, g) && !in(ahead, g)) release(g);
      }
    }
    for (const int32_t g : needed) ready(g);
    if (s_.prefetch) {
      for (const int32_t g : ahead) start_gather(g);
    }
  }

  // UnitReducer: grads, start, finish, reduce_completed.
  void grads(int32_t g) {
    if (pending_[static_cast<size_t>(g)] != 0) finish(g);
    int64_t& full = full_[static_cast<size_t>(g)];
    if (full == 0) {
      full = padded(g) * 4;
      grow(full);
    }
  }
  void start_reduce(int32_t g, bool blocking) {
    if (piece(g) == 0) return;
    if (full_[static_cast<size_t>(g)] == 0) grads(g);
    if (s_.group == 1) {  // one rank: added in place
      shrink(full_[static_cast<size_t>(g)]);
      full_[static_cast<size_t>(g)] = 0;
      return;
    }
    int64_t& pending = pending_[static_cast<size_t>(g)];
    if (wide_grads()) {
      pending = piece(g) * 4;
      grow(pending);
    } else {
      grow(padded(g) * 2);  // packed, then the f32 buffer is freed
      shrink(full_[static_cast<size_t>(g)]);
      full_[static_cast<size_t>(g)] = padded(g) * 2;
      pending = piece(g) * 2;
      grow(pending);
    }
    ++t_.reduce_scatters;
    add(ring_piece_bytes(piece(g) * reduce_size(), s_.group));
    if (blocking) finish(g);
  }
  void finish(int32_t g) {
    int64_t& pending = pending_[static_cast<size_t>(g)];
    if (pending == 0) return;
    if (s_.replicas > 1) add(ring_allreduce_bytes(piece(g) * reduce_size(), s_.replicas));
    const int64_t widened = wide_grads() ? 0 : piece(g) * 4;
    grow(widened);
    shrink(full_[static_cast<size_t>(g)] + pending + widened);
    full_[static_cast<size_t>(g)] = 0;
    pending = 0;
  }
  void finish_all() {
    for (int32_t g = 0; g < u_.num_units(); ++g) finish(g);
  }
  // fsdp no_shard: a complete unit's gradients allreduced in place over the
  // replicas (a 16-bit copy during the call).
  void allreduce_whole(int32_t g) {
    if (s_.replicas <= 1 || piece(g) == 0) return;
    if (!wide_grads()) {
      grow(piece(g) * 2);
      shrink(piece(g) * 2);
    }
    add(ring_allreduce_bytes(piece(g) * reduce_size(), s_.replicas));
  }
  void after_backward(int32_t m, bool last) {
    const auto& completed = u_.completed_at[static_cast<size_t>(m)];
    if (s_.gather == ShardedSchedule::Gather::kForwardOnce) {
      for (const int32_t g : completed) release(g);
    }
    if (!s_.zero2 && !last) return;  // the full gradients keep accumulating
    if (!has_reducer()) {
      for (const int32_t g : completed) allreduce_whole(g);
      return;
    }
    finish_all();
    for (const int32_t g : completed) start_reduce(g, s_.blocking);
    if (m == 0) finish_all();
  }

  // zero2's allgather of the updated pieces: a send buffer of one piece
  // and a receive buffer of the padded unit, resized unit by unit.
  void gather_updated() {
    int64_t send = 0;
    int64_t recv = 0;
    for (int32_t g = 0; g < u_.num_units(); ++g) {
      if (u_.psi[static_cast<size_t>(g)] == 0) continue;
      grow(piece(g) * 4 - send);
      send = piece(g) * 4;
      grow(padded(g) * 4 - recv);
      recv = padded(g) * 4;
      ++t_.allgathers;
      add(ring_piece_bytes(piece(g) * 4, s_.group));
    }
    shrink(send + recv);
  }

  const ShardedUnits& u_;
  ShardedSchedule s_;
  std::vector<int64_t> gathered_;  // [g]: bytes of the gathered f32 parameters
  std::vector<int64_t> staged_;    // [g]: 16-bit allgather staging in flight
  std::vector<int64_t> full_;      // [g]: full gradient buffer (f32, or packed 16-bit)
  std::vector<int64_t> pending_;   // [g]: receive buffer of a reduce-scatter in flight
  int64_t comm_ = 0;
  ShardedTraffic t_;
};

}  // namespace detail

// Replays one training step of a per-unit sharded strategy over the unit
// sizes: the communication buffers' peak, the bytes sent (the norm's
// allreduce over the group included) and the collective calls.
[[nodiscard]] inline ShardedTraffic simulate_sharded_step(const ShardedUnits& units,
                                                          const ShardedSchedule& schedule) {
  return detail::ShardedStepModel(units, schedule).run();
}

}  // namespace tessera::sdk

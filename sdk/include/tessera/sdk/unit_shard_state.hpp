// One rank's training state under the per-unit sharding of
// sdk::UnitShardLayout (ZeRO stage 2 and 3, FSDP): its pieces of every
// unit's gradients (TESSERA_MEM_GRADS) and optimizer state (through the
// host's optimizer table, OPTIMIZER), and either its pieces of the
// parameters too (TESSERA_MEM_PARAMS; ZeRO-3, FSDP) or a borrowed replicated
// copy of all parameters (ZeRO-2). Each piece is ceil(Ψ_u / N) elements,
// padding included, end to end in one shard buffer per kind.
//
// On top of the storage it does what these strategies do alike:
// checkpoint transfer of the pieces by tensor name and element range (so a
// checkpoint of any world size can be read), and the end of a step once the
// gradient pieces hold the reduced sums: the global sum of squares from the
// pieces' (for the clip factor run_step computes) and the clipping and
// optimizer update of this rank's pieces.
#pragma once

#include <cstdint>
#include <span>

#include "tessera/c/host.h"
#include "tessera/sdk/clip.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/flat_state.hpp"
#include "tessera/sdk/replicated_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"
#include "tessera/sdk/unit_gather.hpp"
#include "tessera/sdk/unit_shards.hpp"

namespace tessera::sdk {

// This rank's pieces of the sharded state. `shards`, `optimizer` and a
// borrowed ReplicatedParams must outlive it. Not copyable; not thread-safe.
class UnitShardState {
 public:
  // Holds this rank's parameter pieces (PARAMS) besides the gradient
  // pieces (GRADS) and the optimizer state of shards.shard_elements()
  // elements each, for world rank `rank`. Allocation failure throws
  // std::bad_alloc; the host's optimizer errors propagate.
  UnitShardState(const Host& host, const UnitShardLayout& shards, const OptimizerView& optimizer,
                 int32_t rank)
      : host_(host),
        shards_(shards),
        optimizer_(optimizer),
        params_(host, rank, TESSERA_MEM_PARAMS, static_cast<size_t>(shards.shard_elements())),
        grads_(host, rank, TESSERA_MEM_GRADS, static_cast<size_t>(shards.shard_elements())),
        optim_(optimizer.make_state(shards.shard_elements())) {}
  // Holds no parameter pieces: the parameters are the replicated `params`
  // (whole model), of which this rank updates its pieces' flat ranges.
  UnitShardState(const Host& host, const UnitShardLayout& shards, const OptimizerView& optimizer,
                 int32_t rank, ReplicatedParams& params)
      : host_(host),
        shards_(shards),
        optimizer_(optimizer),
        replicated_(&params),
        grads_(host, rank, TESSERA_MEM_GRADS, static_cast<size_t>(shards.shard_elements())),
        optim_(optimizer.make_state(shards.shard_elements())) {}
  UnitShardState(const UnitShardState&) = delete;
  UnitShardState& operator=(const UnitShardState&) = delete;

  // The parameter shard buffer (empty with replicated parameters) and the
  // gradient shard buffer, shards.shard_elements() elements each.
  [[nodiscard]] std::span<float> params() noexcept { return params_.span(); }
  [[nodiscard]] std::span<float> grads() noexcept { return grads_.span(); }
  // Unit `u`'s piece of them, padding included (UnitShardLayout::piece).
  [[nodiscard]] std::span<float> param_piece(int32_t u) { return shards_.piece(params(), u); }
  [[nodiscard]] std::span<float> grad_piece(int32_t u) { return shards_.piece(grads(), u); }
  // The parameters of unit `u`'s real (non-padding) elements this rank
  // updates: the start of its piece, or its flat range of the replicated
  // parameters.
  [[nodiscard]] std::span<float> real_params(int32_t u) {
    const UnitShard& s = shards_.unit(u);
    if (replicated_ != nullptr) return replicated_->params(s.flat_real());
    return param_piece(u).first(static_cast<size_t>(s.shard.real.size()));
  }
  // Zeroes every gradient piece (the start of a step).
  void zero_grads() { grads_.zero(); }

  // Reads the parameter pieces (when held) and, when the reader has
  // optimizer state (all or nothing over the model, see
  // has_optimizer_state), the optimizer slots of this rank's real elements
  // of every unit. Not collective. Errors of the reader propagate, naming
  // the tensor.
  void load(const StateReader& reader) {
    const FlatLayout& layout = shards_.flat();
    const bool with_optimizer = has_optimizer_state(reader, layout, optimizer_);
    for (int32_t u = 0; u < shards_.num_units(); ++u) {
      const UnitShard& s = shards_.unit(u);
      const FlatRange real = s.flat_real();
      if (real.empty()) continue;
      if (replicated_ == nullptr) read_params(reader, layout, real, real_params(u));
      if (with_optimizer) {
        read_optimizer_state(reader, layout, optimizer_, optim_, real, s.shard_offset);
      }
    }
  }
  // Writes this rank's real elements of unit `u`: its parameters when
  // `with_params` (from real_params(u)), then its optimizer slots. Every
  // element is written once across the ranks of one sharding group.
  void write_piece(const StateWriter& writer, int32_t u, bool with_params) {
    const UnitShard& s = shards_.unit(u);
    const FlatRange real = s.flat_real();
    if (real.empty()) return;
    if (with_params) write_params(writer, shards_.flat(), real, real_params(u));
    write_optimizer_state(writer, shards_.flat(), optimizer_, optim_, real, s.shard_offset);
  }
  // Writes every parameter of unit `u` (held pieces only): gathered through
  // `gather` (collective over its communicator; on error every gathered
  // buffer is released), or, with no gather, from this rank's piece, which
  // must then be the whole unit. Nothing for a unit without parameters.
  void write_whole_unit(const StateWriter& writer, UnitGather* gather, int32_t u) {
    const UnitShard& s = shards_.unit(u);
    if (s.unit.empty()) return;
    const auto size = static_cast<size_t>(s.unit.size());
    if (gather == nullptr) {
      write_params(writer, shards_.flat(), s.unit, param_piece(u).first(size));
      return;
    }
    try {
      const float* full = gather->ready(u, param_piece(u));
      write_params(writer, shards_.flat(), s.unit, std::span<const float>(full, size));
    } catch (...) {
      gather->release_all();
      throw;
    }
    gather->release(u);
  }

  // The end of a step (the sum_squares and update phases of run_step,
  // step_frame.hpp), once every gradient piece holds its sum over the ranks.
  //
  // global_sum_squares: this rank's pieces' sum of squares (padding
  // excluded; each element lives on one rank of `sum_over`) allreduced over
  // `sum_over` (nullptr: this rank's sum is the global one). Collective over
  // `sum_over`; the backend's errors propagate.
  double global_sum_squares(CommView* sum_over) {
    double total = 0.0;
    for (int32_t u = 0; u < shards_.num_units(); ++u) {
      total += host_.sum_squares(grad_piece(u).first(shards_.unit(u).shard.real.size()));
    }
    if (sum_over != nullptr) sum_over->allreduce(std::span<double>(&total, 1));
    return total;
  }
  // scale_and_step: every real gradient element is multiplied by `factor`
  // (the clip factor) and the optimizer updates real_params(u) from them.
  // The optimizer's errors propagate.
  void scale_and_step(const StepArgs& args, float factor) {
    for (int32_t u = 0; u < shards_.num_units(); ++u) {
      const UnitShard& s = shards_.unit(u);
      const auto real = static_cast<size_t>(s.shard.real.size());
      if (real == 0) continue;
      const std::span<float> grads = grad_piece(u).first(real);
      host_.scale(grads, factor);
      optimizer_.step(optim_, s.shard_offset, real_params(u), grads, args.step, args.lr);
    }
  }

 private:
  Host host_;
  const UnitShardLayout& shards_;
  const OptimizerView& optimizer_;
  ReplicatedParams* replicated_ = nullptr;
  TrackedBuffer<float> params_;  // held pieces (empty with replicated parameters)
  TrackedBuffer<float> grads_;
  OptimState optim_;
};

}  // namespace tessera::sdk

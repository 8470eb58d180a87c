// Estimates for strategy selection (strategy interface 2.3): the model
// description a strategy's `estimate` reads and the estimate it returns.
//
// A strategy takes part in selection by giving its class a static
//
//   static sdk::Estimate estimate(const sdk::Host& host, const sdk::Options& opts,
//                                 const sdk::EstimateArgs& args);
//
// which TESSERA_REGISTER_STRATEGY finds and puts in the table. It predicts,
// without a communicator, what the strategy would hold per rank (by memory
// category, as the host tracks it) and send per step, for the model
// described and the options given; it throws (TESSERA_CHECK with
// TESSERA_ERR_INVALID_ARGUMENT) where the strategy cannot run the model.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/c/strategy.h"
#include "tessera/sdk/compressor.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/plugin.hpp"

namespace tessera::sdk {

// A read-only view of tessera_model_desc (host-owned, valid during the call).
class ModelDesc {
 public:
  ModelDesc() = default;
  ModelDesc(const Host& host, const tessera_model_desc& desc) : host_(host), desc_(desc) {
    TESSERA_CHECK(desc.num_units >= 1 && desc.units != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                  "model description has no units");
    units_.reserve(static_cast<size_t>(desc.num_units));
    for (int32_t u = 0; u < desc.num_units; ++u) {
      units_.push_back(detail::copy_versioned(&desc.units[u]));
    }
  }

  [[nodiscard]] std::span<const tessera_unit_desc> units() const noexcept { return units_; }
  [[nodiscard]] int32_t num_units() const noexcept { return static_cast<int32_t>(units_.size()); }
  [[nodiscard]] const tessera_unit_desc& unit(int32_t u) const {
    return units_.at(static_cast<size_t>(u));
  }
  [[nodiscard]] const char* name() const noexcept {
    return desc_.name != nullptr ? desc_.name : "model";
  }
  [[nodiscard]] int64_t seq_len() const noexcept { return desc_.seq_len; }
  [[nodiscard]] int64_t global_batch() const noexcept { return desc_.global_batch; }
  [[nodiscard]] int64_t micro_batches() const noexcept {
    return std::max<int64_t>(desc_.micro_batches, 1);
  }
  [[nodiscard]] int32_t optimizer_slots() const noexcept { return desc_.optimizer_slots; }

  // Σ of the units' own parameters (Ψ).
  [[nodiscard]] int64_t params() const noexcept {
    int64_t n = 0;
    for (const auto& u : units_) n += u.params;
    return n;
  }
  // The unit whose parameters the tied slots of unit `u` use (gpt's head:
  // the embedding), -1 when it has none. A description that does not say
  // (tied_unit < 0 with tied_params > 0) gets the lowest other unit owning
  // at least that many elements.
  [[nodiscard]] int32_t tied_owner(int32_t u) const {
    const tessera_unit_desc& d = unit(u);
    if (d.tied_params <= 0) return -1;
    if (d.tied_unit >= 0 && d.tied_unit < num_units() && d.tied_unit != u) return d.tied_unit;
    for (int32_t k = 0; k < num_units(); ++k) {
      if (k != u && units_[static_cast<size_t>(k)].params >= d.tied_params) return k;
    }
    return -1;
  }
  // Examples of the largest data-parallel slice when the global batch is
  // split over `data_size` ranks, and of its largest micro-batch.
  [[nodiscard]] int64_t slice_examples(int64_t data_size) const noexcept {
    const int64_t d = std::max<int64_t>(data_size, 1);
    return (desc_.global_batch + d - 1) / d;
  }
  [[nodiscard]] int64_t micro_examples(int64_t data_size) const noexcept {
    const int64_t m = micro_batches();
    return (slice_examples(data_size) + m - 1) / m;
  }
  // Forward and backward FLOPs of units [first, last) for `examples`.
  [[nodiscard]] double flops(int32_t first, int32_t last, double examples) const noexcept {
    double f = 0.0;
    for (int32_t u = std::max(first, 0); u < std::min(last, num_units()); ++u) {
      f += units_[static_cast<size_t>(u)].forward_flops +
           units_[static_cast<size_t>(u)].backward_flops;
    }
    return f * examples;
  }

  // Asks the built model, when the description has one, whether it splits
  // over a tensor-parallel group of `size` with `flags` (model 2.1); throws
  // its refusal ("tensor-parallel check: ..."). Does nothing for a
  // description without a model or a model without the check.
  void check_tensor_parallel(int32_t size, uint32_t flags) const {
    const tessera_model_api* api = desc_.model_api;
    if (api == nullptr || desc_.model == nullptr ||
        api->struct_size < offsetof(tessera_model_api, check_tensor_parallel) + sizeof(void*) ||
        api->check_tensor_parallel == nullptr) {
      return;
    }
    detail::check_host_call(host_, api->check_tensor_parallel(desc_.model, size, flags),
                            "tensor-parallel check");
  }

 private:
  Host host_{nullptr};
  tessera_model_desc desc_{};
  std::vector<tessera_unit_desc> units_;
};

struct EstimateArgs {
  int32_t world_size = 1;
  int32_t ranks_per_node = 1;
  ModelDesc model;
  // The kind of the run's gradient compressor ([compression]); none
  // without one, or from a host older than strategy 2.8.
  std::optional<CompressKind> compression;
};

// Which gradient compressors a strategy's create takes. A strategy class
// that declares it (`static constexpr sdk::CompressorUse kCompressors`)
// has its estimate refuse a candidate whose [compression] the create
// would refuse, with the same reason, so a selector does not choose it.
enum class CompressorUse { kNone, kSummable, kAny };

// Throws tessera::Error (invalid argument) when `use` does not take
// `compression`.
inline void check_compressor_use(CompressorUse use, std::optional<CompressKind> compression) {
  if (!compression || use == CompressorUse::kAny) return;
  TESSERA_CHECK(use != CompressorUse::kNone, TESSERA_ERR_INVALID_ARGUMENT,
                "this strategy takes no gradient compressor; remove [compression]");
  TESSERA_CHECK(*compression == CompressKind::kSummable, TESSERA_ERR_INVALID_ARGUMENT,
                "this strategy reduce-scatters its gradients and takes only summable "
                "compressors (fp16, bf16), not one of kind '",
                compress_kind_name(*compression), "'");
}

// What `estimate` returns: peak bytes per rank by category, the peak of
// their sum, traffic per axis, compute and bubble.
struct Estimate {
  int32_t data_size = 1;
  std::array<int64_t, TESSERA_MEM_CATEGORY_COUNT> memory{};
  // Peak of the sum; < 0: the sum of the category peaks.
  int64_t memory_total = -1;
  struct Axis {
    const char* name = nullptr;  // static string
    int32_t group_size = 1;
    int64_t bytes = 0;
    int64_t messages = 0;
  };
  std::vector<Axis> axes;
  double compute_flops = 0.0;
  double bubble = 0.0;

  [[nodiscard]] int64_t& operator[](tessera_mem_category c) {
    return memory.at(static_cast<size_t>(c));
  }
  // Adds traffic to the axis `name` (created on first use).
  void add_traffic(const char* name, int32_t group_size, int64_t bytes, int64_t messages) {
    for (auto& a : axes) {
      if (std::string(a.name) == name) {
        a.bytes += bytes;
        a.messages += messages;
        return;
      }
    }
    TESSERA_CHECK(axes.size() < TESSERA_ESTIMATE_MAX_AXES, TESSERA_ERR_INTERNAL,
                  "estimate: more than ", TESSERA_ESTIMATE_MAX_AXES, " axes");
    axes.push_back({name, group_size, bytes, messages});
  }
  [[nodiscard]] int64_t sum() const noexcept {
    int64_t s = 0;
    for (const int64_t b : memory) s += b;
    return s;
  }
  [[nodiscard]] tessera_estimate to_c() const noexcept {
    tessera_estimate e{};
    e.struct_size = sizeof e;
    e.data_size = data_size;
    for (size_t c = 0; c < memory.size(); ++c) e.memory[c] = memory[c];
    e.memory_total = memory_total >= 0 ? memory_total : sum();
    e.num_axes = static_cast<int32_t>(axes.size());
    for (size_t a = 0; a < axes.size(); ++a) {
      e.axes[a].name = axes[a].name;
      e.axes[a].group_size = axes[a].group_size;
      e.axes[a].bytes = axes[a].bytes;
      e.axes[a].messages = axes[a].messages;
    }
    e.compute_flops = compute_flops;
    e.bubble = bubble;
    return e;
  }
};

// Bytes one rank sends in a ring allreduce of `bytes` over `n` ranks
// (2(n-1)/n of them), and in a ring reduce-scatter or allgather whose
// pieces are `piece_bytes` ((n-1) pieces).
[[nodiscard]] inline int64_t ring_allreduce_bytes(int64_t bytes, int64_t n) noexcept {
  return n <= 1 ? 0 : 2 * (n - 1) * bytes / n;
}
[[nodiscard]] inline int64_t ring_piece_bytes(int64_t piece_bytes, int64_t n) noexcept {
  return n <= 1 ? 0 : (n - 1) * piece_bytes;
}

}  // namespace tessera::sdk

// Per-unit sharding of a model's flat parameters, for strategies that keep
// only a shard of the parameters on each rank (ZeRO stage 3, FSDP) and
// gather one unit at a time.
//
// The sharded units are runs of consecutive model units (by default one
// model unit each; FSDP's min_params wrapping merges several). Every
// sharded unit's owned flat range (the union of its model units'
// FlatLayout::unit_range, contiguous) is split evenly over the N ranks on
// its own (sdk::even_shard), padded so every rank's piece of the unit has
// the same length ceil(Ψ_u / N). A rank keeps its pieces of all sharded
// units end to end in one "shard buffer" of Σ_u ceil(Ψ_u / N) elements:
// sharded unit u's piece starts at shard_offset(u). Because each sharded
// unit is split on its own, its full parameters are one allgather of its
// piece, independent of every other unit.
//
// A model unit may use a parameter owned by another unit (a tied slot, such
// as a language model head tied to the embedding): owners(m) lists the
// sharded units whose parameters model unit m's forward and backward read,
// and grad_done(o) the model unit after whose backward sharded unit o's
// gradients are complete.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_params.hpp"

namespace tessera::sdk {

// One unit's piece of the per-unit sharding on one rank.
struct UnitShard {
  FlatRange unit;             // the unit's owned flat range (tied slots excluded)
  ShardRange shard;           // even_shard of the unit's Ψ_u elements, unit-relative
  uint64_t shard_offset = 0;  // where this rank's piece starts in the shard buffer
  // This rank's real elements as a flat (model-wide) range.
  [[nodiscard]] FlatRange flat_real() const noexcept {
    return {unit.begin + shard.real.begin, unit.begin + shard.real.end};
  }
};

// The grouping of FSDP's `min_params` wrapping: consecutive model units
// join one sharded unit until it owns at least `min_params` parameters
// (the last one may own fewer). Returns the sharded unit of every model
// unit (0, 0, 1, ...). min_params <= 1 keeps one model unit per sharded
// unit.
inline std::vector<int32_t> group_by_min_params(const FlatLayout& layout, uint64_t min_params) {
  std::vector<int32_t> group_of(static_cast<size_t>(layout.num_units()));
  int32_t group = 0;
  uint64_t held = 0;
  for (int32_t m = 0; m < layout.num_units(); ++m) {
    group_of[static_cast<size_t>(m)] = group;
    held += layout.unit_range(m).size();
    if (held >= min_params && m + 1 < layout.num_units()) {
      ++group;
      held = 0;
    }
  }
  return group_of;
}

// The per-unit shard layout of one rank among `world`. Immutable once built;
// `layout` must outlive it.
class UnitShardLayout {
 public:
  // `group_of` gives the sharded unit of every model unit: it starts at 0
  // and each entry equals the previous one or the previous one plus 1
  // (empty: one sharded unit per model unit). Throws tessera::Error
  // (invalid argument) for world < 1, a rank outside [0, world) (see
  // even_shard) or a `group_of` of another length or not of that form.
  UnitShardLayout(const FlatLayout& layout, int32_t world, int32_t rank,
                  std::vector<int32_t> group_of = {})
      : layout_(&layout), world_(world), rank_(rank), group_of_(std::move(group_of)) {
    const int32_t models = layout.num_units();
    if (group_of_.empty()) {
      for (int32_t m = 0; m < models; ++m) group_of_.push_back(m);
    }
    TESSERA_CHECK(group_of_.size() == static_cast<size_t>(models), TESSERA_ERR_INVALID_ARGUMENT,
                  "unit shards: grouping of ", group_of_.size(), " units for a model of ", models,
                  " units");
    for (size_t m = 0; m < group_of_.size(); ++m) {
      const int32_t prev = m == 0 ? 0 : group_of_[m - 1];
      TESSERA_CHECK(group_of_[m] == prev || (m > 0 && group_of_[m] == prev + 1),
                    TESSERA_ERR_INVALID_ARGUMENT, "unit shards: model unit ", m,
                    " is in sharded unit ", group_of_[m], " after sharded unit ", prev,
                    " (groups must be runs of consecutive units numbered from 0)");
    }
    const int32_t units = group_of_.empty() ? 0 : group_of_.back() + 1;
    units_.resize(static_cast<size_t>(units));
    grad_done_.assign(static_cast<size_t>(units), models);
    completed_at_.resize(static_cast<size_t>(models));
    entries_.resize(static_cast<size_t>(units));
    owners_.resize(static_cast<size_t>(models));
    // The model units' ranges are consecutive in unit order: a sharded
    // unit spans from its first model unit's begin to its last one's end.
    for (int32_t m = models - 1; m >= 0; --m) {
      UnitShard& s = units_[static_cast<size_t>(group_of_[static_cast<size_t>(m)])];
      if (m + 1 == models ||
          group_of_[static_cast<size_t>(m) + 1] != group_of_[static_cast<size_t>(m)]) {
        s.unit.end = layout.unit_range(m).end;
      }
      s.unit.begin = layout.unit_range(m).begin;
    }
    uint64_t offset = 0;
    for (int32_t u = 0; u < units; ++u) {
      UnitShard& s = units_[static_cast<size_t>(u)];
      s.shard = even_shard(s.unit.size(), world, rank);
      s.shard_offset = offset;
      offset += s.shard.shard_size;
    }
    shard_elements_ = offset;
    for (size_t m = 0; m < group_of_.size(); ++m) {
      int32_t& done = grad_done_[static_cast<size_t>(group_of_[m])];
      done = std::min(done, static_cast<int32_t>(m));
    }
    for (size_t i = 0; i < layout.entries().size(); ++i) {
      const FlatEntry& e = layout.entries()[i];
      const int32_t g = group_of_[static_cast<size_t>(e.unit)];
      entries_[static_cast<size_t>(g)].push_back(i);
      int32_t& done = grad_done_[static_cast<size_t>(g)];
      done = std::min(done, e.final_grad_unit());
    }
    for (int32_t m = 0; m < models; ++m) {
      auto& owners = owners_[static_cast<size_t>(m)];
      for (size_t p = 0; p < layout.num_slots(m); ++p) {
        const int32_t o = group_of_[static_cast<size_t>(
            layout.entry(layout.entry_of(m, static_cast<int32_t>(p))).unit)];
        if (std::find(owners.begin(), owners.end(), o) == owners.end()) owners.push_back(o);
      }
      std::sort(owners.begin(), owners.end());
    }
    for (int32_t o = 0; o < units; ++o) {
      completed_at_[static_cast<size_t>(grad_done_[static_cast<size_t>(o)])].push_back(o);
    }
  }

  [[nodiscard]] const FlatLayout& flat() const noexcept { return *layout_; }
  [[nodiscard]] int32_t world() const noexcept { return world_; }
  [[nodiscard]] int32_t rank() const noexcept { return rank_; }
  // Sharded units (equal to model_units() without grouping).
  [[nodiscard]] int32_t num_units() const noexcept { return static_cast<int32_t>(units_.size()); }
  // Model units.
  [[nodiscard]] int32_t model_units() const noexcept {
    return static_cast<int32_t>(group_of_.size());
  }
  // The sharded unit holding model unit `m`.
  [[nodiscard]] int32_t group_of(int32_t m) const { return group_of_.at(checked_model(m)); }
  // Elements of this rank's shard buffer: Σ_u ceil(Ψ_u / N), padding included.
  [[nodiscard]] uint64_t shard_elements() const noexcept { return shard_elements_; }
  // Sharded unit `u`'s piece on this rank.
  [[nodiscard]] const UnitShard& unit(int32_t u) const { return units_.at(checked(u)); }
  // Elements of sharded unit `u`'s gathered buffer: ceil(Ψ_u / N) · N.
  [[nodiscard]] uint64_t gathered_elements(int32_t u) const { return unit(u).shard.padded_total; }
  // The sharded units owning the parameters model unit `m`'s slots use (its
  // own when it owns any slot, plus the owners of its tied slots), ascending.
  [[nodiscard]] const std::vector<int32_t>& owners(int32_t m) const {
    return owners_.at(checked_model(m));
  }
  // The model unit after whose backward the gradients of every parameter
  // sharded unit `owner` holds are complete in a reverse-order backward
  // pass (the lowest model unit using any of them; the first model unit of
  // `owner` when it holds none).
  [[nodiscard]] int32_t grad_done(int32_t owner) const { return grad_done_.at(checked(owner)); }
  // The sharded units whose gradients are complete once model unit `m`'s
  // backward has run (those with grad_done(o) == m), ascending.
  [[nodiscard]] const std::vector<int32_t>& completed_at(int32_t m) const {
    return completed_at_.at(checked_model(m));
  }
  // Indices into flat().entries() of the parameters sharded unit `u` holds.
  [[nodiscard]] const std::vector<size_t>& entries(int32_t u) const {
    return entries_.at(checked(u));
  }

  // Sharded unit `u`'s piece (shard_size elements, padding included) of a
  // shard buffer of shard_elements() elements laid out like this rank's
  // (parameters, gradients). Throws tessera::Error (internal) for a buffer
  // of another size.
  template <typename T>
  [[nodiscard]] std::span<T> piece(std::span<T> shard_buffer, int32_t u) const {
    TESSERA_CHECK(shard_buffer.size() == shard_elements_, TESSERA_ERR_INTERNAL,
                  "unit shards: shard buffer of ", shard_buffer.size(), " elements, expected ",
                  shard_elements_);
    const UnitShard& s = unit(u);
    return shard_buffer.subspan(static_cast<size_t>(s.shard_offset),
                                static_cast<size_t>(s.shard.shard_size));
  }
  // Points the slots in `ptrs` of every parameter sharded unit `u` holds
  // (their owners and tied users) at `base` plus the parameter's offset in
  // the unit: `base` is a gathered (or whole) unit buffer in flat order.
  // nullptr unbinds them.
  void bind(SlotPointers& ptrs, int32_t u, float* base) const {
    const uint64_t begin = unit(u).unit.begin;
    for (const size_t i : entries(u)) {
      ptrs.bind_entry(i, base != nullptr ? base + (layout_->entry(i).offset - begin) : nullptr);
    }
  }

 private:
  [[nodiscard]] size_t checked(int32_t u) const {
    TESSERA_CHECK(u >= 0 && static_cast<size_t>(u) < units_.size(), TESSERA_ERR_INVALID_ARGUMENT,
                  "unit shards: sharded unit ", u, " out of range (", units_.size(), " units)");
    return static_cast<size_t>(u);
  }
  [[nodiscard]] size_t checked_model(int32_t m) const {
    TESSERA_CHECK(m >= 0 && static_cast<size_t>(m) < group_of_.size(), TESSERA_ERR_INVALID_ARGUMENT,
                  "unit shards: unit ", m, " out of range (model has ", group_of_.size(),
                  " units)");
    return static_cast<size_t>(m);
  }

  const FlatLayout* layout_;
  int32_t world_;
  int32_t rank_;
  std::vector<int32_t> group_of_;  // [model unit]: sharded unit
  std::vector<UnitShard> units_;
  std::vector<std::vector<int32_t>> owners_;        // [model unit]
  std::vector<int32_t> grad_done_;                  // [sharded unit]: model unit
  std::vector<std::vector<size_t>> entries_;        // [sharded unit]
  std::vector<std::vector<int32_t>> completed_at_;  // [model unit]: sharded units
  uint64_t shard_elements_ = 0;
};

}  // namespace tessera::sdk

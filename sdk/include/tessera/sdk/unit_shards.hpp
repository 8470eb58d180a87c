// Per-unit sharding of a model's flat parameters, for strategies that keep
// only a shard of the parameters on each rank (ZeRO stage 3, FSDP) and
// gather one unit at a time.
//
// Every unit's owned flat range (FlatLayout::unit_range) is split evenly
// over the N ranks on its own (sdk::even_shard), padded so every rank's
// piece of the unit has the same length ceil(Ψ_u / N). A rank keeps its
// pieces of all units end to end in one "shard buffer" of
// Σ_u ceil(Ψ_u / N) elements: unit u's piece starts at shard_offset(u).
// Because each unit is split on its own, a unit's full parameters are one
// allgather of its piece, independent of every other unit.
//
// A unit may use a parameter owned by another unit (a tied slot, such as a
// language model head tied to the embedding): owners(u) lists the units
// whose parameters u's forward and backward read, and grad_done(o) the unit
// after whose backward owner o's gradients are complete.
#pragma once

#include <algorithm>
#include <cstdint>
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

// The per-unit shard layout of one rank among `world`. Immutable once built;
// `layout` must outlive it.
class UnitShardLayout {
 public:
  // Throws tessera::Error (invalid argument) for world < 1 or a rank
  // outside [0, world) (see even_shard).
  UnitShardLayout(const FlatLayout& layout, int32_t world, int32_t rank)
      : layout_(&layout), world_(world), rank_(rank) {
    const int32_t units = layout.num_units();
    units_.resize(static_cast<size_t>(units));
    owners_.resize(static_cast<size_t>(units));
    grad_done_.resize(static_cast<size_t>(units));
    entries_.resize(static_cast<size_t>(units));
    uint64_t offset = 0;
    for (int32_t u = 0; u < units; ++u) {
      UnitShard& s = units_[static_cast<size_t>(u)];
      s.unit = layout.unit_range(u);
      s.shard = even_shard(s.unit.size(), world, rank);
      s.shard_offset = offset;
      offset += s.shard.shard_size;
      grad_done_[static_cast<size_t>(u)] = u;
    }
    shard_elements_ = offset;
    for (size_t i = 0; i < layout.entries().size(); ++i) {
      const FlatEntry& e = layout.entries()[i];
      entries_[static_cast<size_t>(e.unit)].push_back(i);
      int32_t& done = grad_done_[static_cast<size_t>(e.unit)];
      done = std::min(done, e.final_grad_unit());
    }
    for (int32_t u = 0; u < units; ++u) {
      auto& owners = owners_[static_cast<size_t>(u)];
      for (size_t p = 0; p < layout.num_slots(u); ++p) {
        const int32_t o = layout.entry(layout.entry_of(u, static_cast<int32_t>(p))).unit;
        if (std::find(owners.begin(), owners.end(), o) == owners.end()) owners.push_back(o);
      }
      std::sort(owners.begin(), owners.end());
    }
  }

  [[nodiscard]] const FlatLayout& flat() const noexcept { return *layout_; }
  [[nodiscard]] int32_t world() const noexcept { return world_; }
  [[nodiscard]] int32_t rank() const noexcept { return rank_; }
  [[nodiscard]] int32_t num_units() const noexcept { return static_cast<int32_t>(units_.size()); }
  // Elements of this rank's shard buffer: Σ_u ceil(Ψ_u / N), padding included.
  [[nodiscard]] uint64_t shard_elements() const noexcept { return shard_elements_; }
  // Unit `u`'s piece on this rank.
  [[nodiscard]] const UnitShard& unit(int32_t u) const { return units_.at(checked(u)); }
  // Elements of unit `u`'s gathered buffer: ceil(Ψ_u / N) · N.
  [[nodiscard]] uint64_t gathered_elements(int32_t u) const { return unit(u).shard.padded_total; }
  // The units owning the parameters unit `u`'s slots use (u itself when it
  // owns any slot, plus the owners of its tied slots), ascending.
  [[nodiscard]] const std::vector<int32_t>& owners(int32_t u) const {
    return owners_.at(checked(u));
  }
  // The unit after whose backward the gradients of every parameter owned by
  // `owner` are complete in a reverse-order backward pass (the lowest unit
  // using any of them; `owner` itself when it owns none).
  [[nodiscard]] int32_t grad_done(int32_t owner) const { return grad_done_.at(checked(owner)); }
  // Indices into flat().entries() of the parameters unit `u` owns.
  [[nodiscard]] const std::vector<size_t>& entries(int32_t u) const {
    return entries_.at(checked(u));
  }

 private:
  [[nodiscard]] size_t checked(int32_t u) const {
    TESSERA_CHECK(u >= 0 && static_cast<size_t>(u) < units_.size(), TESSERA_ERR_INVALID_ARGUMENT,
                  "unit shards: unit ", u, " out of range (model has ", units_.size(), " units)");
    return static_cast<size_t>(u);
  }

  const FlatLayout* layout_;
  int32_t world_;
  int32_t rank_;
  std::vector<UnitShard> units_;
  std::vector<std::vector<int32_t>> owners_;
  std::vector<int32_t> grad_done_;
  std::vector<std::vector<size_t>> entries_;
  uint64_t shard_elements_ = 0;
};

}  // namespace tessera::sdk

// Flat parameter layout over a model: every parameter the model owns, laid
// end to end in (unit, param) order, so a strategy can keep parameters,
// gradients and optimizer state as single f32 buffers (replicated), or cut
// them into equal shards (ZeRO, FSDP), and still hand each unit the
// per-slot pointer arrays its forward and backward take.
//
//   FlatLayout    offsets of the owned parameters, the unit behind each slot
//                 (tied slots resolve to their owner), and the tensor pieces
//                 of any flat range (for checkpoint reads and writes).
//   ShardRange    an even split of the flat range over N ranks, padded so
//                 every rank's shard has the same length.
//   SlotPointers  per-unit pointer arrays into flat storage; tied slots
//                 point at their owner.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/sdk/error.hpp"
#include "tessera/sdk/strategy.hpp"

namespace tessera::sdk {

// A half-open range [begin, end) of flat elements.
struct FlatRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  [[nodiscard]] uint64_t size() const noexcept { return end > begin ? end - begin : 0; }
  [[nodiscard]] bool empty() const noexcept { return end <= begin; }
};

// One owned (non-tied) parameter in the flat layout.
struct FlatEntry {
  int32_t unit = 0;       // owning unit
  int32_t param = 0;      // its slot there
  std::string full_name;  // "<unit>.<param>", the checkpoint key
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // first element in the flat layout
  uint64_t numel = 0;
  // Units with a slot on this parameter (the owner and every unit tied to
  // it), ascending.
  std::vector<int32_t> users;
  // In a backward pass that runs the units in reverse order, the gradient
  // is complete once this unit's backward returns (the lowest user).
  [[nodiscard]] int32_t final_grad_unit() const noexcept { return users.front(); }
  [[nodiscard]] FlatRange range() const noexcept { return {offset, offset + numel}; }
};

// The part of one tensor that falls in a flat range.
struct FlatPiece {
  size_t entry = 0;            // index into FlatLayout::entries()
  uint64_t tensor_offset = 0;  // first element within the tensor
  uint64_t flat_offset = 0;    // the same element in the flat layout
  uint64_t count = 0;
};

// The flat layout of a model's owned parameters. Immutable once built.
class FlatLayout {
 public:
  // Walks every unit and slot of `model`. Throws tessera::Error (invalid
  // argument) naming the slot when a tie points at a missing or tied slot,
  // or when a parameter has a negative size.
  explicit FlatLayout(const ModelView& model) {
    const int32_t units = model.num_units();
    slot_entry_.resize(static_cast<size_t>(units));
    unit_ranges_.resize(static_cast<size_t>(units));
    std::vector<std::vector<int64_t>> owned_index(static_cast<size_t>(units));
    uint64_t offset = 0;
    for (int32_t u = 0; u < units; ++u) {
      const auto& params = model.params(u);
      owned_index[static_cast<size_t>(u)].assign(params.size(), -1);
      unit_ranges_[static_cast<size_t>(u)].begin = offset;
      for (size_t p = 0; p < params.size(); ++p) {
        const ParamInfo& info = params[p];
        if (info.tied) continue;
        TESSERA_CHECK(info.numel >= 0, TESSERA_ERR_INVALID_ARGUMENT, "parameter '", info.full_name,
                      "' has negative size ", info.numel);
        FlatEntry e;
        e.unit = u;
        e.param = static_cast<int32_t>(p);
        e.full_name = info.full_name;
        e.shape = info.shape;
        e.offset = offset;
        e.numel = static_cast<uint64_t>(info.numel);
        offset += e.numel;
        owned_index[static_cast<size_t>(u)][p] = static_cast<int64_t>(entries_.size());
        entries_.push_back(std::move(e));
      }
      unit_ranges_[static_cast<size_t>(u)].end = offset;
    }
    total_ = offset;
    for (int32_t u = 0; u < units; ++u) {
      const auto& params = model.params(u);
      auto& slots = slot_entry_[static_cast<size_t>(u)];
      slots.resize(params.size());
      for (size_t p = 0; p < params.size(); ++p) {
        const ParamInfo& info = params[p];
        const bool in_range = info.owner_unit >= 0 && info.owner_unit < units &&
                              info.owner_param >= 0 &&
                              static_cast<size_t>(info.owner_param) <
                                  owned_index[static_cast<size_t>(info.owner_unit)].size();
        TESSERA_CHECK(in_range, TESSERA_ERR_INVALID_ARGUMENT, "slot '", model.unit_name(u), ".",
                      info.name, "' is tied to a missing parameter (unit ", info.owner_unit,
                      ", slot ", info.owner_param, ")");
        const int64_t idx = owned_index[static_cast<size_t>(info.owner_unit)]
                                       [static_cast<size_t>(info.owner_param)];
        TESSERA_CHECK(idx >= 0, TESSERA_ERR_INVALID_ARGUMENT, "slot '", model.unit_name(u), ".",
                      info.name, "' is tied to '", info.full_name, "', which is itself tied");
        slots[p] = static_cast<size_t>(idx);
        auto& users = entries_[static_cast<size_t>(idx)].users;
        if (users.empty() || users.back() != u) users.push_back(u);
      }
    }
    for (auto& e : entries_) std::sort(e.users.begin(), e.users.end());
  }

  // Owned parameters in flat order.
  [[nodiscard]] const std::vector<FlatEntry>& entries() const noexcept { return entries_; }
  [[nodiscard]] const FlatEntry& entry(size_t i) const { return entries_.at(i); }
  // Elements of all owned parameters together.
  [[nodiscard]] uint64_t total() const noexcept { return total_; }
  [[nodiscard]] int32_t num_units() const noexcept {
    return static_cast<int32_t>(slot_entry_.size());
  }
  // Slots of `unit` (tied ones included).
  [[nodiscard]] size_t num_slots(int32_t unit) const { return slots(unit).size(); }
  // The entry whose storage slot (`unit`, `param`) uses (the owner's when tied).
  [[nodiscard]] size_t entry_of(int32_t unit, int32_t param) const {
    return slots(unit).at(static_cast<size_t>(param));
  }
  // Flat range of the parameters `unit` owns (tied slots excluded); they are
  // contiguous because the layout is in (unit, param) order.
  [[nodiscard]] FlatRange unit_range(int32_t unit) const {
    return unit_ranges_.at(static_cast<size_t>(unit));
  }

  // The tensor pieces covering flat elements [begin, end), in flat order.
  // Elements at or past total() (shard padding) belong to no tensor and are
  // left out.
  [[nodiscard]] std::vector<FlatPiece> pieces(uint64_t begin, uint64_t end) const {
    std::vector<FlatPiece> out;
    end = std::min(end, total_);
    if (begin >= end) return out;
    // First entry whose range ends after `begin`.
    auto it =
        std::upper_bound(entries_.begin(), entries_.end(), begin,
                         [](uint64_t v, const FlatEntry& e) { return v < e.offset + e.numel; });
    for (; it != entries_.end() && it->offset < end; ++it) {
      const uint64_t b = std::max(begin, it->offset);
      const uint64_t e = std::min(end, it->offset + it->numel);
      if (b >= e) continue;
      out.push_back(
          FlatPiece{static_cast<size_t>(it - entries_.begin()), b - it->offset, b, e - b});
    }
    return out;
  }

 private:
  [[nodiscard]] const std::vector<size_t>& slots(int32_t unit) const {
    TESSERA_CHECK(unit >= 0 && static_cast<size_t>(unit) < slot_entry_.size(),
                  TESSERA_ERR_INVALID_ARGUMENT, "unit ", unit, " out of range (model has ",
                  slot_entry_.size(), " units)");
    return slot_entry_[static_cast<size_t>(unit)];
  }

  std::vector<FlatEntry> entries_;
  std::vector<std::vector<size_t>> slot_entry_;  // [unit][slot] -> entry
  std::vector<FlatRange> unit_ranges_;
  uint64_t total_ = 0;
};

// One rank's part of a flat range of `total` elements split evenly over
// `world` ranks. The range is padded to a multiple of `world` so that every
// shard has the same length `shard_size` (collectives such as allgather and
// reduce-scatter need equal blocks); the padding sits at the end of the last
// shards and holds no parameter.
struct ShardRange {
  uint64_t shard_size = 0;    // elements per rank, padding included
  uint64_t padded_total = 0;  // shard_size * world
  FlatRange padded;           // [rank * shard_size, (rank + 1) * shard_size)
  FlatRange real;             // padded ∩ [0, total): elements that exist

  // Padding elements in this rank's shard.
  [[nodiscard]] uint64_t padding() const noexcept { return shard_size - real.size(); }
};

// The shard of `rank` among `world`. Throws tessera::Error (invalid
// argument) when world < 1 or rank is outside [0, world).
inline ShardRange even_shard(uint64_t total, int32_t world, int32_t rank) {
  TESSERA_CHECK(world >= 1, TESSERA_ERR_INVALID_ARGUMENT, "shard: world size ", world,
                " must be >= 1");
  TESSERA_CHECK(rank >= 0 && rank < world, TESSERA_ERR_INVALID_ARGUMENT, "shard: rank ", rank,
                " outside [0, ", world, ")");
  const auto w = static_cast<uint64_t>(world);
  const auto r = static_cast<uint64_t>(rank);
  ShardRange s;
  s.shard_size = (total + w - 1) / w;
  s.padded_total = s.shard_size * w;
  s.padded = {r * s.shard_size, (r + 1) * s.shard_size};
  s.real = {std::min(s.padded.begin, total), std::min(s.padded.end, total)};
  return s;
}

// Per-unit pointer arrays for a model's slots, as forward/backward take
// them. A slot points at the storage of its entry (tied slots at their
// owner's). Pointers are plain views: the storage must outlive their use.
class SlotPointers {
 public:
  // All pointers null until bound.
  explicit SlotPointers(const FlatLayout& layout) : layout_(&layout) {
    ptrs_.resize(static_cast<size_t>(layout.num_units()));
    for (int32_t u = 0; u < layout.num_units(); ++u) {
      ptrs_[static_cast<size_t>(u)].assign(layout.num_slots(u), nullptr);
    }
  }
  // Every slot bound into `flat`, which holds layout.total() elements.
  SlotPointers(const FlatLayout& layout, float* flat) : SlotPointers(layout) { bind_all(flat); }

  // Points every slot at its entry's offset within `flat`.
  void bind_all(float* flat) {
    for (size_t i = 0; i < layout_->entries().size(); ++i) {
      bind_entry(i, flat != nullptr ? flat + layout_->entries()[i].offset : nullptr);
    }
  }
  // Points every slot that uses entry `entry` (its owner and tied slots) at
  // `data` (numel elements, or nullptr to unbind), e.g. a gathered copy.
  void bind_entry(size_t entry, float* data) {
    const FlatEntry& e = layout_->entry(entry);
    for (const int32_t u : e.users) {
      auto& slots = ptrs_[static_cast<size_t>(u)];
      for (size_t p = 0; p < slots.size(); ++p) {
        if (layout_->entry_of(u, static_cast<int32_t>(p)) == entry) slots[p] = data;
      }
    }
  }

  // Pointers of `unit` in slot order: writable (gradients) or read-only
  // (parameters).
  [[nodiscard]] float* const* unit(int32_t unit) const {
    return ptrs_.at(static_cast<size_t>(unit)).data();
  }
  [[nodiscard]] const float* const* unit_const(int32_t unit) const { return this->unit(unit); }
  // True when every slot of `unit` is bound.
  [[nodiscard]] bool bound(int32_t unit) const {
    const auto& slots = ptrs_.at(static_cast<size_t>(unit));
    return std::all_of(slots.begin(), slots.end(), [](const float* p) { return p != nullptr; });
  }

 private:
  const FlatLayout* layout_;
  std::vector<std::vector<float*>> ptrs_;
};

}  // namespace tessera::sdk

// How one rank of a tensor-parallel group holds a model's parameters: every
// parameter the model declares COLUMN or ROW (tessera_param_info.split) is
// cut along that dimension, each of its split_blocks blocks alike, and the
// rank keeps its shard; REPLICATED parameters are held whole. The plan lays
// the held tensors end to end (the shards first, then the replicated ones,
// so a global norm can count the second range on one rank of the group
// only), and moves each tensor to and from checkpoints as N-d boxes of the
// whole tensor, so a checkpoint holds whole tensors under their usual names
// and loads under any strategy, group size and world size.
//
// Used by the `tensor` strategy; a strategy that combines tensor
// parallelism with other axes plans the entries it holds the same way.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/flat_state.hpp"
#include "tessera/sdk/optimizer_view.hpp"
#include "tessera/sdk/state_io.hpp"
#include "tessera/sdk/strategy.hpp"

namespace tessera::sdk {

// Before any parameter is cut, with a group of `size` > 1 ranks and
// TESSERA_TP_* `flags`: refuses (invalid argument) a unit without
// TESSERA_UNIT_TENSOR_PARALLEL ("<who>: unit 'layer0' does not support
// tensor parallelism (no TESSERA_UNIT_TENSOR_PARALLEL), so <option> = 2
// cannot split it; ..."), under TESSERA_TP_SEQUENCE one without
// TESSERA_UNIT_SEQUENCE_PARALLEL, and what the model's own check refuses
// (ModelView::check_tensor_parallel, naming its key), prefixed with
// "<who>: [strategy.options] <option> = N, mode = "..." cannot split the
// model: ".
inline void require_tensor_parallel(const ModelView& model, int32_t size, uint32_t flags,
                                    std::string_view who, std::string_view option) {
  if (size <= 1) return;
  const bool sequence = (flags & TESSERA_TP_SEQUENCE) != 0;
  for (int32_t u = 0; u < model.num_units(); ++u) {
    const uint32_t unit_flags = model.unit_flags(u);
    if ((unit_flags & TESSERA_UNIT_TENSOR_PARALLEL) == 0) {
      throw Error(
          TESSERA_ERR_INVALID_ARGUMENT,
          ::tessera::detail::concat(
              who, ": unit '", model.unit_name(u),
              "' does not support tensor parallelism (no TESSERA_UNIT_TENSOR_PARALLEL), "
              "so ",
              option, " = ", size, " cannot split it; use ", option, " = 1 or another strategy"));
    }
    if (sequence && (unit_flags & TESSERA_UNIT_SEQUENCE_PARALLEL) == 0) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  ::tessera::detail::concat(
                      who, ": unit '", model.unit_name(u),
                      "' does not support sequence parallelism (no "
                      "TESSERA_UNIT_SEQUENCE_PARALLEL), so mode = \"sequence\" cannot split its "
                      "rows; use mode = \"tensor\""));
    }
  }
  try {
    model.check_tensor_parallel(size, flags);
  } catch (const Error& e) {
    throw Error(e.status(),
                ::tessera::detail::concat(who, ": [strategy.options] ", option, " = ", size,
                                          ", mode = \"", sequence ? "sequence" : "tensor",
                                          "\" cannot split the model: ", e.what()));
  }
}

namespace detail {
// The io of TensorShards::move that reads tensor `name` (a whole tensor or
// a box of it) from `reader`, and the one that writes it.
inline auto shard_reader_io(const StateReader& reader, std::string name) {
  return [&reader, name = std::move(name)](
             const std::vector<int64_t>& shape, const std::vector<int64_t>& offset,
             const std::vector<int64_t>& extent, std::span<float> out) {
    if (offset.empty()) {
      reader.read(name, shape, 0, out);
    } else {
      reader.read_box(name, shape, offset, extent, out);
    }
  };
}
inline auto shard_writer_io(const StateWriter& writer, std::string name) {
  return [&writer, name = std::move(name)](
             const std::vector<int64_t>& shape, const std::vector<int64_t>& offset,
             const std::vector<int64_t>& extent, std::span<float> data) {
    if (offset.empty()) {
      writer.write(name, shape, 0, data);
    } else {
      writer.write_box(name, shape, offset, extent, data);
    }
  };
}
}  // namespace detail

class TensorShards {
 public:
  // How this rank holds one flat entry.
  struct Held {
    bool held = false;           // the rank holds the entry at all
    bool split = false;          // a shard (else the whole tensor)
    int32_t axis = 0;            // the split dimension
    int32_t blocks = 1;          // equal blocks of it, each split over the group
    std::vector<int64_t> shape;  // this rank's shard (the whole tensor when not split)
    uint64_t at = 0;             // first element in the held buffers
    uint64_t numel = 0;
  };

  TensorShards() = default;

  // Plans the entries of `flat` that `holds(entry)` selects (all when it
  // is empty) for rank `rank` of a group of `size`, the shards first in
  // the held buffers; or, with a non-empty `order`, exactly the entries it
  // lists, in its order (a pipeline stage keeps each unit's tensors
  // together). A split dimension that
  // `size` (times the parameter's split_blocks) does not divide is an
  // invalid argument "<who>: parameter '<name>' [shape] is split by column
  // on dimension 1 (32), which size = 3 does not divide; ..." — except the
  // last unit's COLUMN parameters (a classifier head), which are then held
  // whole (kept_whole() lists them, for the caller to log).
  TensorShards(const FlatLayout& flat, const ModelView& model, int32_t size, int32_t rank,
               std::string_view who, const std::function<bool(size_t entry)>& holds = {},
               const std::vector<size_t>& order = {})
      : size_(size), rank_(rank) {
    const int32_t units = model.num_units();
    held_.assign(flat.entries().size(), Held{});
    std::vector<bool> whole(held_.size(), true);
    for (size_t i = 0; i < held_.size(); ++i) {
      const FlatEntry& e = flat.entry(i);
      Held& h = held_[i];
      h.held = order.empty() ? (!holds || holds(i))
                             : std::find(order.begin(), order.end(), i) != order.end();
      h.shape = e.shape;
      if (!h.held) continue;
      const ParamInfo& info = model.params(e.unit)[static_cast<size_t>(e.param)];
      if (size_ == 1 || info.split == TESSERA_SPLIT_REPLICATED || e.shape.empty()) continue;
      h.axis = info.split == TESSERA_SPLIT_ROW ? 0 : static_cast<int32_t>(e.shape.size()) - 1;
      h.blocks = std::max(info.split_blocks, 1);
      const int64_t dim = e.shape[static_cast<size_t>(h.axis)];
      if (dim % (static_cast<int64_t>(h.blocks) * size_) != 0) {
        if (e.unit == units - 1 && info.split == TESSERA_SPLIT_COLUMN) {
          kept_whole_.push_back(i);
          continue;
        }
        throw Error(
            TESSERA_ERR_INVALID_ARGUMENT,
            ::tessera::detail::concat(
                who, ": parameter '", e.full_name, "' ", shape_text(e.shape), " is split by ",
                info.split == TESSERA_SPLIT_ROW ? "row" : "column", " on dimension ", h.axis, " (",
                dim, h.blocks > 1 ? ::tessera::detail::concat(" in ", h.blocks, " blocks") : "",
                "), which size = ", size_, " does not divide; the model's width there must be a ",
                "multiple of ", static_cast<int64_t>(h.blocks) * size_,
                " or [strategy.options] size must divide it"));
      }
      h.split = true;
      h.shape[static_cast<size_t>(h.axis)] = dim / size_;
      whole[i] = false;
    }
    uint64_t at = 0;
    if (!order.empty()) {
      for (const size_t i : order) {
        Held& h = held_.at(i);
        h.numel = 1;
        for (const int64_t d : h.shape) h.numel *= static_cast<uint64_t>(d);
        h.at = at;
        at += h.numel;
      }
      split_total_ = 0;  // no split-first range
      total_ = at;
      return;
    }
    for (const bool pass_whole : {false, true}) {
      for (size_t i = 0; i < held_.size(); ++i) {
        Held& h = held_[i];
        if (!h.held || whole[i] != pass_whole) continue;
        h.numel = 1;
        for (const int64_t d : h.shape) h.numel *= static_cast<uint64_t>(d);
        h.at = at;
        at += h.numel;
      }
      if (!pass_whole) split_total_ = at;
    }
    total_ = at;
  }

  [[nodiscard]] const Held& held(size_t entry) const { return held_.at(entry); }
  [[nodiscard]] size_t entries() const noexcept { return held_.size(); }
  // Elements held; without an `order`, the shards occupy [0,
  // split_total()) and the replicated tensors [split_total(), total())
  // (with one, split_total() is 0).
  [[nodiscard]] uint64_t total() const noexcept { return total_; }
  [[nodiscard]] uint64_t split_total() const noexcept { return split_total_; }
  // Last-unit COLUMN entries the group does not divide, held whole.
  [[nodiscard]] const std::vector<size_t>& kept_whole() const noexcept { return kept_whole_; }

  // Hands this rank's part of `entry` (held in `local`, its numel
  // elements) to io(shape, box_offset, box_extent, values): every block of
  // a shard as a box of the whole tensor (through a dense copy when the
  // block is not contiguous in the shard), a whole tensor as one call with
  // empty box vectors. io reads into or writes from the values.
  template <class Io>
  void move(const FlatLayout& flat, size_t entry, std::span<float> local, Io&& io) const {
    const Held& h = held_.at(entry);
    const FlatEntry& e = flat.entry(entry);
    if (!h.split) {
      io(e.shape, std::vector<int64_t>(), std::vector<int64_t>(), local);
      return;
    }
    // The shard is `blocks` boxes: block j's part of the split dimension is
    // [j B + rank B/p, j B + (rank+1) B/p) with B = dim / blocks. In the
    // shard, block j's part is [j B/p, (j+1) B/p) of the same dimension.
    const auto axis = static_cast<size_t>(h.axis);
    const int64_t block = e.shape[axis] / h.blocks;
    const int64_t part = block / size_;
    std::vector<int64_t> offset(e.shape.size(), 0);
    std::vector<int64_t> extent = e.shape;
    extent[axis] = part;
    int64_t outer = 1;  // rows before the split dimension
    for (size_t d = 0; d < axis; ++d) outer *= e.shape[d];
    int64_t inner = 1;  // elements after it
    for (size_t d = axis + 1; d < e.shape.size(); ++d) inner *= e.shape[d];
    std::vector<float> box(static_cast<size_t>(outer * part * inner));
    for (int32_t j = 0; j < h.blocks; ++j) {
      offset[axis] = j * block + static_cast<int64_t>(rank_) * part;
      if (h.blocks == 1 && outer == 1) {
        io(e.shape, offset, extent, local);  // contiguous: straight into the shard
        continue;
      }
      // Copy the shard's block part in and out of a dense box.
      const int64_t stride = h.shape[axis] * inner;  // the shard's span of one outer row
      const auto copy = [&](bool into_box) {
        for (int64_t o = 0; o < outer; ++o) {
          float* shard = local.data() + o * stride + j * part * inner;
          float* dense = box.data() + o * part * inner;
          if (into_box) {
            std::copy(shard, shard + part * inner, dense);
          } else {
            std::copy(dense, dense + part * inner, shard);
          }
        }
      };
      copy(true);
      io(e.shape, offset, extent, std::span<float>(box));
      copy(false);
    }
  }

  // Calls fn(whole_offset, local_offset, count) for the pieces of this
  // rank's elements [local_begin, local_end) of `entry` (offsets into its
  // held storage), each contiguous in the held storage and in the whole
  // row-major tensor (whole_offset: its first element there): a shard's
  // block parts are contiguous runs of the whole tensor, so a flat range
  // of a shard (a further cut, e.g. over data-parallel ranks) is a run of
  // plain element ranges of the whole tensor for a checkpoint.
  template <class Fn>
  void for_each_piece(const FlatLayout& flat, size_t entry, uint64_t local_begin,
                      uint64_t local_end, Fn&& fn) const {
    const Held& h = held_.at(entry);
    if (local_begin >= local_end) return;
    if (!h.split) {
      fn(local_begin, local_begin, local_end - local_begin);
      return;
    }
    const FlatEntry& e = flat.entry(entry);
    const auto axis = static_cast<size_t>(h.axis);
    const auto block = static_cast<uint64_t>(e.shape[axis] / h.blocks);
    const uint64_t part = block / static_cast<uint64_t>(size_);
    uint64_t outer = 1;
    for (size_t d = 0; d < axis; ++d) outer *= static_cast<uint64_t>(e.shape[d]);
    uint64_t inner = 1;
    for (size_t d = axis + 1; d < e.shape.size(); ++d) inner *= static_cast<uint64_t>(e.shape[d]);
    const uint64_t run = part * inner;  // one block part of one outer row
    const auto blocks = static_cast<uint64_t>(h.blocks);
    for (uint64_t o = 0; o < outer; ++o) {
      for (uint64_t j = 0; j < blocks; ++j) {
        const uint64_t local = (o * blocks + j) * run;
        const uint64_t lo = std::max(local, local_begin);
        const uint64_t hi = std::min(local + run, local_end);
        if (lo >= hi) continue;
        const uint64_t whole = (o * static_cast<uint64_t>(e.shape[axis]) + j * block +
                                static_cast<uint64_t>(rank_) * part) *
                                   inner +
                               (lo - local);
        fn(whole, lo, hi - lo);
      }
    }
  }

  // Reads every held entry's part into `params` (laid out as planned) and,
  // when the checkpoint has the optimizer's state, into `optim`'s slots.
  void read(const StateReader& reader, const FlatLayout& flat, const OptimizerView& opt,
            std::span<float> params, OptimState& optim) const {
    read_params(reader, flat, params);
    if (!has_optimizer_state(reader, flat, opt)) return;
    for (size_t i = 0; i < held_.size(); ++i) {
      if (!held_[i].held) continue;
      const FlatEntry& e = flat.entry(i);
      for (int32_t k = 0; k < opt.num_slots(); ++k) {
        move(flat, i, optim.slot(k).subspan(held_[i].at, held_[i].numel),
             detail::shard_reader_io(reader, optim_key(e.full_name, opt.slot_name(k))));
      }
    }
  }
  // The parameters only.
  void read_params(const StateReader& reader, const FlatLayout& flat,
                   std::span<float> params) const {
    for (size_t i = 0; i < held_.size(); ++i) {
      if (!held_[i].held) continue;
      move(flat, i, params.subspan(held_[i].at, held_[i].numel),
           detail::shard_reader_io(reader, param_key(flat.entry(i).full_name)));
    }
  }

  // Writes every held entry's part of `params` and `optim`'s slots (only
  // the entries `which` selects, when given); the replicated (whole)
  // entries only when `with_whole` (one rank of a group writes them, or
  // every rank when the writer wants all replicas).
  void write(const StateWriter& writer, const FlatLayout& flat, const OptimizerView& opt,
             std::span<float> params, OptimState& optim, bool with_whole,
             const std::function<bool(size_t entry)>& which = {}) const {
    write_params(writer, flat, params, with_whole, which);
    for (size_t i = 0; i < held_.size(); ++i) {
      const Held& h = held_[i];
      if (!h.held || (!h.split && !with_whole) || (which && !which(i))) continue;
      const FlatEntry& e = flat.entry(i);
      for (int32_t k = 0; k < opt.num_slots(); ++k) {
        move(flat, i, optim.slot(k).subspan(h.at, h.numel),
             detail::shard_writer_io(writer, optim_key(e.full_name, opt.slot_name(k))));
      }
    }
  }
  // The parameters only.
  void write_params(const StateWriter& writer, const FlatLayout& flat, std::span<float> params,
                    bool with_whole, const std::function<bool(size_t entry)>& which = {}) const {
    for (size_t i = 0; i < held_.size(); ++i) {
      const Held& h = held_[i];
      if (!h.held || (!h.split && !with_whole) || (which && !which(i))) continue;
      move(flat, i, params.subspan(h.at, h.numel),
           detail::shard_writer_io(writer, param_key(flat.entry(i).full_name)));
    }
  }

  // "[a, b, c]".
  static std::string shape_text(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }

 private:
  int32_t size_ = 1;
  int32_t rank_ = 0;
  std::vector<Held> held_;
  std::vector<size_t> kept_whole_;
  uint64_t total_ = 0;
  uint64_t split_total_ = 0;
};

}  // namespace tessera::sdk

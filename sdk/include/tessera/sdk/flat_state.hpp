// Moving a strategy's flat state (parameters and optimizer slots laid out by
// a FlatLayout) to and from the host's state reader and writer. Each call
// covers one flat range, so a replicated strategy passes the whole layout
// and a sharded one passes its shard: the host addresses tensors by name
// and element range and reshards between world sizes itself.
//
// Tensor names follow tessera/c/strategy.h: parameters "<unit>.<param>",
// optimizer slots "optim.<unit>.<param>.<slot>".
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "tessera/sdk/error.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/strategy.hpp"

namespace tessera::sdk {

namespace detail {
// Throws unless `range` (a flat range the caller holds) fits `values` and
// the layout.
inline void check_flat_span(const FlatLayout& layout, FlatRange range, size_t values,
                            const char* what) {
  TESSERA_CHECK(range.begin <= range.end && range.end <= layout.total(),
                TESSERA_ERR_INVALID_ARGUMENT, what, ": flat range [", range.begin, ", ", range.end,
                ") is outside the ", layout.total(), " parameter elements");
  TESSERA_CHECK(values >= range.size(), TESSERA_ERR_INVALID_ARGUMENT, what, ": buffer of ", values,
                " elements for a range of ", range.size());
}
}  // namespace detail

// Reads the parameter elements of flat `range` into out[0, range.size()),
// one slice per tensor piece. Errors of the reader (missing tensor, other
// shape) propagate as tessera::Error with the host's message; a range
// outside the layout or a short buffer is an invalid argument.
inline void read_params(const StateReader& reader, const FlatLayout& layout, FlatRange range,
                        std::span<float> out) {
  detail::check_flat_span(layout, range, out.size(), "read parameters");
  for (const FlatPiece& p : layout.pieces(range.begin, range.end)) {
    const FlatEntry& e = layout.entry(p.entry);
    reader.read(param_key(e.full_name), e.shape, p.tensor_offset,
                out.subspan(p.flat_offset - range.begin, p.count));
  }
}

// Writes the parameter elements of flat `range` from data[0, range.size()).
inline void write_params(const StateWriter& writer, const FlatLayout& layout, FlatRange range,
                         std::span<const float> data) {
  detail::check_flat_span(layout, range, data.size(), "write parameters");
  for (const FlatPiece& p : layout.pieces(range.begin, range.end)) {
    const FlatEntry& e = layout.entry(p.entry);
    writer.write(param_key(e.full_name), e.shape, p.tensor_offset,
                 data.subspan(p.flat_offset - range.begin, p.count));
  }
}

// Whether the reader holds optimizer state for this optimizer: false when
// it holds none of the slot tensors (a fresh start), true when it holds all
// of them. Holding only some is an error (invalid argument) naming the first
// missing tensor and one that is present. Checked over the whole model, so
// every rank reaches the same answer whatever range it owns.
inline bool has_optimizer_state(const StateReader& reader, const FlatLayout& layout,
                                const OptimizerView& optimizer) {
  std::string present;
  std::string missing;
  for (const FlatEntry& e : layout.entries()) {
    for (int32_t k = 0; k < optimizer.num_slots(); ++k) {
      const std::string key = optim_key(e.full_name, optimizer.slot_name(k));
      std::string& into = reader.has(key) ? present : missing;
      if (into.empty()) into = key;
    }
  }
  if (present.empty()) return false;
  TESSERA_CHECK(missing.empty(), TESSERA_ERR_INVALID_ARGUMENT, "optimizer state of '",
                optimizer.name(), "' is incomplete: tensor '", missing, "' is missing although '",
                present, "' is present");
  return true;
}

// Reads every slot of the optimizer state for flat `range` into
// state.slot(k)[state_offset, state_offset + range.size()) when the reader
// has optimizer state (see has_optimizer_state); returns whether it did.
// Leaves the state untouched and returns false when the reader has none.
inline bool read_optimizer_state(const StateReader& reader, const FlatLayout& layout,
                                 const OptimizerView& optimizer, OptimState& state, FlatRange range,
                                 uint64_t state_offset = 0) {
  if (!has_optimizer_state(reader, layout, optimizer)) return false;
  for (int32_t k = 0; k < optimizer.num_slots(); ++k) {
    const std::span<float> slot = state.slot(k);
    TESSERA_CHECK(state_offset <= slot.size(), TESSERA_ERR_INVALID_ARGUMENT,
                  "read optimizer state: offset ", state_offset, " past the state's ", slot.size(),
                  " elements");
    const std::span<float> out = slot.subspan(static_cast<size_t>(state_offset));
    detail::check_flat_span(layout, range, out.size(), "read optimizer state");
    const std::string name = optimizer.slot_name(k);
    for (const FlatPiece& p : layout.pieces(range.begin, range.end)) {
      const FlatEntry& e = layout.entry(p.entry);
      reader.read(optim_key(e.full_name, name), e.shape, p.tensor_offset,
                  out.subspan(p.flat_offset - range.begin, p.count));
    }
  }
  return true;
}

// Writes every slot of the optimizer state for flat `range` from
// state.slot(k)[state_offset, state_offset + range.size()).
inline void write_optimizer_state(const StateWriter& writer, const FlatLayout& layout,
                                  const OptimizerView& optimizer, const OptimState& state,
                                  FlatRange range, uint64_t state_offset = 0) {
  for (int32_t k = 0; k < optimizer.num_slots(); ++k) {
    const std::span<const float> slot = state.slot(k);
    TESSERA_CHECK(state_offset <= slot.size(), TESSERA_ERR_INVALID_ARGUMENT,
                  "write optimizer state: offset ", state_offset, " past the state's ", slot.size(),
                  " elements");
    const std::span<const float> data = slot.subspan(static_cast<size_t>(state_offset));
    detail::check_flat_span(layout, range, data.size(), "write optimizer state");
    const std::string name = optimizer.slot_name(k);
    for (const FlatPiece& p : layout.pieces(range.begin, range.end)) {
      const FlatEntry& e = layout.entry(p.entry);
      writer.write(optim_key(e.full_name, name), e.shape, p.tensor_offset,
                   data.subspan(p.flat_offset - range.begin, p.count));
    }
  }
}

}  // namespace tessera::sdk

// What the in-tree model plugins share on top of the SDK's unit interface
// (tessera/sdk/model.hpp): the SDK's types under tessera::model, and a unit
// base that initialises its parameters by the naming convention of
// kernels::init_by_convention.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "tessera/sdk/model.hpp"

namespace tessera::model {

using sdk::model::BatchView;
using sdk::model::ConstView;
using sdk::model::ParamRef;
using sdk::model::ParamSpec;
using sdk::model::SplitHint;
using sdk::model::Unit;
using sdk::model::UnitContext;
using sdk::model::UnitCost;
using sdk::model::UnitInput;

// A unit whose init follows the naming convention: names ending in "_g"
// (norm gains) get 1, "_b" or "b" (biases) 0, everything else normal(0,
// 0.02) from a stream keyed by seed, unit name and parameter name.
class ConventionUnit : public Unit {
 public:
  void init(std::span<float* const> params, uint64_t seed) const override;

 protected:
  ConventionUnit(std::string name, bool first, bool last) : Unit(std::move(name), first, last) {}
};

// The cost of a token-embedding lookup over `seq_len` tokens of width `d`:
// a gather per token forward, the same scatter backward, the ids kept.
inline UnitCost embedding_cost(int64_t seq_len, int64_t d) noexcept {
  const auto n = static_cast<double>(seq_len * d);
  UnitCost c;
  c.forward_flops = n;
  c.backward_flops = n;
  c.activation_bytes = 4.0 * static_cast<double>(seq_len);
  return c;
}

}  // namespace tessera::model

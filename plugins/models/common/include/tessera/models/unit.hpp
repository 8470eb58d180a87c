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

// Sets a unit's activation figures (model 2.2) from f32 elements per
// example that its context holds once a forward and its backward have run
// (contexts keep their buffers between micro-batches, so that is what the
// host tracks while a context lives): `split` divided among the ranks of a
// tensor-parallel group in both modes, `sequence` divided only in sequence
// mode, `rest` whole on every rank; `output` the forward output's elements.
inline void set_activations(UnitCost& c, double split, double sequence, double rest,
                            double output) noexcept {
  c.split_activation_bytes = 4.0 * split;
  c.sequence_activation_bytes = 4.0 * sequence;
  c.activation_bytes = 4.0 * (split + sequence + rest);
  c.output_bytes = 4.0 * output;
}

// The cost of a token-embedding lookup over `seq_len` tokens of width `d`:
// a gather per token forward, the same scatter backward. The context keeps
// the token ids (int32) and the whole output gradient, and the output
// (this rank's rows in sequence mode).
inline UnitCost embedding_cost(int64_t seq_len, int64_t d) noexcept {
  const auto n = static_cast<double>(seq_len * d);
  UnitCost c;
  c.forward_flops = n;
  c.backward_flops = n;
  set_activations(c, 0.0, n, static_cast<double>(seq_len) + n, n);
  return c;
}

}  // namespace tessera::model

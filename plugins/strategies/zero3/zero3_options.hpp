// The options of the `zero3` strategy ([strategy.options]) and their checks.
#pragma once

#include "tessera/c/common.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {

// Declarations handed to the host (key, type, default, help).
inline constexpr tessera_option_decl kZero3Options[] = {
    {"prefetch", TESSERA_OPT_BOOL, "true",
     "start the allgather of the next unit's parameters (forward order in the forward pass, "
     "reverse order in the backward pass) while the current unit computes; false: gather each "
     "unit only when it is about to run"},
    {"reduce_dtype", TESSERA_OPT_STRING, "f32",
     "dtype of the gradient reduce-scatter on the wire (f32, bf16, f16); the gradient and "
     "parameter shards stay f32"},
    sdk::kActivationCheckpointingOption,
};

struct Zero3Options {
  bool prefetch = true;  // overlap the next unit's allgather with the current unit
  tessera_dtype reduce_dtype = TESSERA_F32;

  // Reads the options. Throws tessera::Error (invalid argument) naming
  // reduce_dtype and its value when it is not f32, bf16 or f16.
  static Zero3Options read(const sdk::Options& options);
};

}  // namespace tessera::strategies

// The options of the `zero2` strategy ([strategy.options]) and their checks.
#pragma once

#include "tessera/c/common.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {

// Declarations handed to the host (key, type, default, help).
inline constexpr tessera_option_decl kZero2Options[] = {
    {"overlap", TESSERA_OPT_BOOL, "true",
     "start each unit's gradient reduce-scatter non-blocking right after the unit's backward, "
     "so it runs while the next unit computes; false: wait for it before going on"},
    {"reduce_dtype", TESSERA_OPT_STRING, "f32",
     "dtype of the gradients on the wire: f32, bf16 or f16 (gradients are converted before "
     "the reduce-scatter and back to f32 into the gradient shard)"},
    sdk::kActivationCheckpointingOption,
};

struct Zero2Options {
  bool overlap = true;                       // non-blocking reduce-scatter per unit
  tessera_dtype reduce_dtype = TESSERA_F32;  // wire dtype of the gradients

  // Reads and checks the options. Throws tessera::Error (invalid argument)
  // naming `reduce_dtype` and its value when it is not f32, bf16 or f16.
  static Zero2Options read(const sdk::Options& options);
};

}  // namespace tessera::strategies

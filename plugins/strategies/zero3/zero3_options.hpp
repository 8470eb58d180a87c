// The options of the `zero3` strategy ([strategy.options]) and their checks.
#pragma once

#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"

namespace tessera::strategies {

// Declarations handed to the host (key, type, default, help).
inline constexpr tessera_option_decl kZero3Options[] = {
    {"prefetch", TESSERA_OPT_BOOL, "true",
     "start the allgather of the next unit's parameters (forward order in the forward pass, "
     "reverse order in the backward pass) while the current unit computes; false: gather each "
     "unit only when it is about to run"},
};

struct Zero3Options {
  bool prefetch = true;  // overlap the next unit's allgather with the current unit

  // Reads the options. The host has already checked their types; nothing
  // else can be wrong, so this does not throw beyond the host's errors.
  static Zero3Options read(const sdk::Options& options);
};

}  // namespace tessera::strategies

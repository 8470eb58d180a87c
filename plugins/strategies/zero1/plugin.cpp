// Registration of the `zero1` strategy plugin.
#include "zero1_options.hpp"
#include "zero1_strategy.hpp"

TESSERA_REGISTER_STRATEGY(tessera::strategies::Zero1Strategy, "zero1", "0.1.0",
                          "ZeRO stage 1: replicated parameters and gradients, optimizer state "
                          "sharded over the ranks, updated shards allgathered",
                          tessera::strategies::kZero1Options)

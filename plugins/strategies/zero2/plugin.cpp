// Registration of the `zero2` strategy plugin.
#include "zero2_options.hpp"
#include "zero2_strategy.hpp"

TESSERA_REGISTER_STRATEGY(tessera::strategies::Zero2Strategy, "zero2", "0.1.0",
                          "ZeRO stage 2: parameters replicated, gradients and optimizer state "
                          "sharded over the ranks unit by unit, each unit's gradients "
                          "reduce-scattered right after its backward",
                          tessera::strategies::kZero2Options)

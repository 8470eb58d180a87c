// Registration of the `zero3` strategy plugin.
#include "zero3_options.hpp"
#include "zero3_strategy.hpp"

TESSERA_REGISTER_STRATEGY(tessera::strategies::Zero3Strategy, "zero3", "0.1.0",
                          "ZeRO stage 3: parameters, gradients and optimizer state sharded over "
                          "the ranks, each unit's parameters gathered around its forward and "
                          "backward",
                          tessera::strategies::kZero3Options)

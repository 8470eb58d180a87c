// Registration of the `none` strategy plugin.
#include "none_strategy.hpp"

TESSERA_REGISTER_STRATEGY(tessera::strategies::NoneStrategy, "none", "0.1.0",
                          "one rank trains alone: the reference for every other strategy",
                          TESSERA_NO_OPTIONS)

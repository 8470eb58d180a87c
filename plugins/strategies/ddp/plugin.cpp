// Registration of the `ddp` strategy plugin.
#include "ddp_options.hpp"
#include "ddp_strategy.hpp"

TESSERA_REGISTER_STRATEGY(tessera::strategies::DdpStrategy, "ddp", "0.1.0",
                          "data parallel: replicated model, bucketed gradient allreduce "
                          "overlapped with backward",
                          tessera::strategies::kDdpOptions)

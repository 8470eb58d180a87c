// Registration of the `elastic` strategy plugin.
#include "elastic_strategy.hpp"

TESSERA_REGISTER_STRATEGY(tessera::strategies::ElasticStrategy, "elastic", "0.1.0",
                          "elastic data parallel: wraps ddp, zero1, ...; survives lost ranks "
                          "by re-forming the world and restoring state from the survivors' memory",
                          tessera::strategies::kElasticOptions)

// Registration of the `async_sgd` strategy plugin.
#include "async_sgd_options.hpp"
#include "async_sgd_strategy.hpp"

TESSERA_REGISTER_STRATEGY(tessera::strategies::AsyncSgdStrategy, "async_sgd", "0.1.0",
                          "parameter servers with bounded staleness: workers push gradient "
                          "shards, servers update and reply without a global barrier",
                          tessera::strategies::kAsyncSgdOptions)

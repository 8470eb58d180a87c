// Registration of the `fsdp` strategy plugin.
#include "fsdp_options.hpp"
#include "fsdp_strategy.hpp"

TESSERA_REGISTER_STRATEGY(tessera::strategies::FsdpStrategy, "fsdp", "0.1.0",
                          "fully sharded data parallel: full_shard, shard_grad_op, no_shard or "
                          "hybrid_shard of parameters, gradients and optimizer state, unit by unit",
                          tessera::strategies::kFsdpOptions)

// Strategy selection: the estimate of a configuration's strategy, and the
// selector run behind `[strategy] name = "auto"` and `tessera select`.
#pragma once

#include "tessera/c/strategy.h"
#include "tessera/core/config.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/core/train/model_description.hpp"

namespace tessera::train {

// The batch of `config` as a description sees it: data.batch_size,
// data.micro_batches and the optimizer's state slots.
BatchSpec batch_spec(const Config& config);

// The estimate of `config`'s strategy (with its [strategy.options]) for its
// model on `world_size` ranks, `ranks_per_node` to a node (0: all on one).
// Throws what StrategyPlugin::estimate throws, and the model's and the
// optimizer's own errors.
tessera_estimate estimate_config(const Config& config, const PluginRegistry& registry,
                                 int world_size, int ranks_per_node = 0);

}  // namespace tessera::train

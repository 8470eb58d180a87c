// Strategy selection (selection.hpp).
#include "tessera/core/train/selection.hpp"

#include <memory>

#include "tessera/core/optim/optimizer.hpp"
#include "tessera/core/train/strategy_host.hpp"

namespace tessera::train {

BatchSpec batch_spec(const Config& config) {
  BatchSpec batch;
  batch.global_batch = config.data.batch_size;
  batch.micro_batches = config.data.micro_batches;
  batch.optimizer_slots = static_cast<int32_t>(make_optimizer(config.optimizer)->slots());
  return batch;
}

tessera_estimate estimate_config(const Config& config, const PluginRegistry& registry,
                                 int world_size, int ranks_per_node) {
  const StrategyPlugin strategy(registry, config.strategy.name, &config.strategy.options,
                                config.strategy.options_where);
  const std::unique_ptr<model::Model> model = model::make_model(config.model, registry);
  const ModelDescription desc(*model, batch_spec(config));
  return strategy.estimate(desc, world_size, ranks_per_node > 0 ? ranks_per_node : world_size);
}

}  // namespace tessera::train

// Helpers of the sharded-checkpoint tests (see sharded_support.hpp).
#include "sharded_support.hpp"

namespace tessera::test {

std::string strategy_options_of(const std::string& strategy) {
  return strategy == "fsdp" ? "sharding_strategy = \"full_shard\"" : "";
}

RunSpec checkpoint_spec(const std::string& model, const std::string& strategy, int world,
                        int64_t steps, const std::string& checkpoint) {
  RunSpec spec;
  spec.model = model;
  spec.strategy = strategy;
  spec.strategy_options = strategy_options_of(strategy);
  spec.world = world;
  spec.batch = 12;
  spec.steps = steps;
  spec.extra_toml = checkpoint;
  return spec;
}

}  // namespace tessera::test

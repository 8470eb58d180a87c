// Options of the `fsdp` strategy (see fsdp_options.hpp).
#include "fsdp_options.hpp"

#include "tessera/sdk/error.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {

namespace {

ShardingStrategy parse_sharding(const std::string& v) {
  if (v == "full_shard") return ShardingStrategy::kFullShard;
  if (v == "shard_grad_op") return ShardingStrategy::kShardGradOp;
  if (v == "no_shard") return ShardingStrategy::kNoShard;
  if (v == "hybrid_shard") return ShardingStrategy::kHybridShard;
  throw Error(TESSERA_ERR_INVALID_ARGUMENT,
              ::tessera::detail::concat("fsdp: option 'sharding_strategy' = '", v,
                                        "' is not valid; valid: full_shard, shard_grad_op, "
                                        "no_shard, hybrid_shard"));
}

}  // namespace

const char* sharding_name(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::kFullShard:
      return "full_shard";
    case ShardingStrategy::kShardGradOp:
      return "shard_grad_op";
    case ShardingStrategy::kNoShard:
      return "no_shard";
    case ShardingStrategy::kHybridShard:
      return "hybrid_shard";
  }
  return "?";
}

FsdpOptions FsdpOptions::read(const sdk::Options& options, int32_t world_size) {
  FsdpOptions o;
  o.sharding = parse_sharding(options.get_string("sharding_strategy"));
  o.shard_group_size = options.get_int("shard_group_size");
  o.prefetch = options.get_bool("prefetch");
  const std::string wrap = options.get_string("wrap");
  TESSERA_CHECK(wrap == "unit" || wrap == "min_params", TESSERA_ERR_INVALID_ARGUMENT,
                "fsdp: option 'wrap' = '", wrap, "' is not valid; valid: unit, min_params");
  o.min_params = options.get_int("min_params");
  if (wrap == "min_params") {
    TESSERA_CHECK(o.min_params >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                  "fsdp: option 'min_params' = ", o.min_params,
                  " must be at least 1 with wrap = 'min_params'");
  } else {
    TESSERA_CHECK(o.min_params == 0, TESSERA_ERR_INVALID_ARGUMENT,
                  "fsdp: option 'min_params' = ", o.min_params,
                  " is only valid with wrap = 'min_params', not '", wrap, "'");
  }
  o.param_dtype = sdk::read_comm_dtype(options, "param_dtype", "fsdp");
  o.reduce_dtype = sdk::read_comm_dtype(options, "reduce_dtype", "fsdp");
  if (o.sharding != ShardingStrategy::kHybridShard) {
    TESSERA_CHECK(o.shard_group_size == 0, TESSERA_ERR_INVALID_ARGUMENT,
                  "fsdp: option 'shard_group_size' = ", o.shard_group_size,
                  " is only valid with sharding_strategy = 'hybrid_shard', not '",
                  sharding_name(o.sharding), "'");
  }
  TESSERA_CHECK(o.shard_group_size >= 0 && o.shard_group_size <= world_size,
                TESSERA_ERR_INVALID_ARGUMENT,
                "fsdp: option 'shard_group_size' = ", o.shard_group_size, " must be in [0, ",
                world_size, "] (the world size)");
  TESSERA_CHECK(o.shard_group_size == 0 || world_size % o.shard_group_size == 0,
                TESSERA_ERR_INVALID_ARGUMENT,
                "fsdp: option 'shard_group_size' = ", o.shard_group_size,
                " does not divide the world size ", world_size);
  return o;
}

int32_t FsdpOptions::group_size(int32_t world_size) const {
  switch (sharding) {
    case ShardingStrategy::kNoShard:
      return 1;
    case ShardingStrategy::kHybridShard:
      return shard_group_size == 0 ? world_size : static_cast<int32_t>(shard_group_size);
    default:
      return world_size;
  }
}

}  // namespace tessera::strategies

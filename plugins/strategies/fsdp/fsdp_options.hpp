// The options of the `fsdp` strategy ([strategy.options]) and their checks.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/c/common.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {

// Declarations handed to the host (key, type, default, help).
inline constexpr tessera_option_decl kFsdpOptions[] = {
    {"sharding_strategy", TESSERA_OPT_STRING, "full_shard",
     "full_shard: parameters, gradients and optimizer state sharded, parameters gathered around "
     "each unit's forward and backward; shard_grad_op: parameters gathered once before the "
     "forward and kept until the unit's backward; no_shard: everything replicated, gradients "
     "allreduced; hybrid_shard: full_shard inside groups of shard_group_size ranks, replicated "
     "across groups"},
    {"shard_group_size", TESSERA_OPT_INT, "0",
     "hybrid_shard only: ranks per sharding group (consecutive ranks; must divide the world "
     "size); 0: the whole world"},
    {"wrap", TESSERA_OPT_STRING, "unit",
     "unit: every model unit is one FSDP unit; min_params: consecutive model units are merged "
     "into one FSDP unit until it holds at least min_params parameters (the last may hold "
     "fewer), one allgather and one reduce-scatter per FSDP unit"},
    {"min_params", TESSERA_OPT_INT, "0",
     "wrap = min_params only: the least parameter count of an FSDP unit (>= 1)"},
    {"param_dtype", TESSERA_OPT_STRING, "f32",
     "dtype the parameters are allgathered in (f32, bf16, f16); the shards keep f32 master "
     "weights and the gathered values are widened back to f32 for compute"},
    {"reduce_dtype", TESSERA_OPT_STRING, "f32",
     "dtype of the gradient reduce-scatter and of the allreduce across replicas (f32, bf16, "
     "f16); the shards keep f32 gradients"},
    {"prefetch", TESSERA_OPT_BOOL, "true",
     "start the allgather of the next unit's parameters while the current unit computes"},
    sdk::kActivationCheckpointingOption,
};

// The sharding strategies.
enum class ShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard };

struct FsdpOptions {
  ShardingStrategy sharding = ShardingStrategy::kFullShard;
  int64_t shard_group_size = 0;  // hybrid_shard: ranks per group (0: world)
  int64_t min_params = 0;        // wrap = min_params: least parameters per FSDP unit (0: unit)
  tessera_dtype param_dtype = TESSERA_F32;
  tessera_dtype reduce_dtype = TESSERA_F32;
  bool prefetch = true;

  // Reads and checks the options against `world_size`. Throws
  // tessera::Error (invalid argument) naming the option and value for an
  // unknown sharding_strategy, wrap, param_dtype or reduce_dtype, for a
  // min_params below 1 with wrap = min_params (or set with wrap = unit),
  // and for a shard_group_size that is negative, larger than the world or
  // does not divide it (or is set without hybrid_shard).
  static FsdpOptions read(const sdk::Options& options, int32_t world_size);

  // Ranks per sharding group for `world_size` ranks: the world for
  // full_shard and shard_grad_op, 1 for no_shard, shard_group_size (0: the
  // world) for hybrid_shard.
  [[nodiscard]] int32_t group_size(int32_t world_size) const;
};

// The option value naming `s` ("full_shard", ...).
const char* sharding_name(ShardingStrategy s);

}  // namespace tessera::strategies

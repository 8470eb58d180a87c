// The options of the `fsdp` strategy ([strategy.options]) and their checks.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"

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
     "unit: every model unit is one FSDP unit (the only policy this version implements)"},
    {"param_dtype", TESSERA_OPT_STRING, "f32",
     "dtype the parameters are gathered in (f32 only in this version)"},
    {"reduce_dtype", TESSERA_OPT_STRING, "f32",
     "dtype of the gradient reduction (f32 only in this version)"},
    {"prefetch", TESSERA_OPT_BOOL, "true",
     "start the allgather of the next unit's parameters while the current unit computes"},
};

// The sharding strategies.
enum class ShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard };

struct FsdpOptions {
  ShardingStrategy sharding = ShardingStrategy::kFullShard;
  int64_t shard_group_size = 0;  // hybrid_shard: ranks per group (0: world)
  bool prefetch = true;

  // Reads and checks the options against `world_size`. Throws
  // tessera::Error (invalid argument) naming the option and value for an
  // unknown sharding_strategy, wrap, param_dtype or reduce_dtype, for a
  // dtype or wrap policy this version does not implement, and for a
  // shard_group_size that is negative, larger than the world or does not
  // divide it (or is set without hybrid_shard).
  static FsdpOptions read(const sdk::Options& options, int32_t world_size);

  // Ranks per sharding group for `world_size` ranks: the world for
  // full_shard and shard_grad_op, 1 for no_shard, shard_group_size (0: the
  // world) for hybrid_shard.
  [[nodiscard]] int32_t group_size(int32_t world_size) const;
};

// The option value naming `s` ("full_shard", ...).
const char* sharding_name(ShardingStrategy s);

}  // namespace tessera::strategies

// The options of the `zero1` strategy ([strategy.options]) and their checks.
#pragma once

#include "tessera/c/plugin.h"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {

// Declarations handed to the host (key, type, default, help).
inline constexpr tessera_option_decl kZero1Options[] = {
    {"bucket_mb", TESSERA_OPT_FLOAT, "25",
     "gradient bucket capacity in MiB over all ranks: N equal blocks, block r owned by rank r; "
     "each bucket is reduce-scattered and allgathered in place, with no staging"},
    {"first_bucket_mb", TESSERA_OPT_FLOAT, "1",
     "capacity in MiB of the first bucket, kept small so communication starts early"},
    {"overlap", TESSERA_OPT_BOOL, "true",
     "reduce-scatter each bucket as soon as its gradients are complete during backward; "
     "false: after the whole backward pass"},
    sdk::kHierarchyOption,
    sdk::kRanksPerNodeOption,
    sdk::kActivationCheckpointingOption,
};

// bucket_mb, first_bucket_mb, overlap, hierarchy and ranks_per_node, read
// and checked by sdk::BucketOptions::read (a bucket size that is not a
// positive finite number is an invalid argument naming the option) and
// node_size; the capacities in f32 elements over all ranks are what
// sdk::plan_shard_buckets takes.
using Zero1Options = sdk::BucketOptions;

}  // namespace tessera::strategies

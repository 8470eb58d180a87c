// The options of the `zero1` strategy ([strategy.options]) and their checks.
#pragma once

#include <cstdint>

#include "tessera/c/common.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"

namespace tessera::strategies {

// Declarations handed to the host (key, type, default, help).
inline constexpr tessera_option_decl kZero1Options[] = {
    {"bucket_mb", TESSERA_OPT_FLOAT, "25",
     "gradient bucket capacity in MiB over all ranks (a slice of every rank's shard); two "
     "buckets in flight bound the communication staging, the parameter allgather included"},
    {"first_bucket_mb", TESSERA_OPT_FLOAT, "1",
     "capacity in MiB of the first bucket, kept small so communication starts early"},
    {"overlap", TESSERA_OPT_BOOL, "true",
     "reduce-scatter each bucket as soon as its gradients are complete during backward; "
     "false: after the whole backward pass"},
};

struct Zero1Options {
  double bucket_mb = 25.0;       // capacity of every bucket after the first, MiB
  double first_bucket_mb = 1.0;  // capacity of the first bucket, MiB
  bool overlap = true;           // start buckets during backward

  // Reads and checks the options. Throws tessera::Error (invalid argument)
  // naming the option when a bucket size is not a positive finite number.
  static Zero1Options read(const sdk::Options& options);

  // Capacities of the first and of every later bucket in f32 elements
  // (over all ranks), as sdk::plan_shard_buckets takes them.
  [[nodiscard]] uint64_t first_bucket_elements() const;
  [[nodiscard]] uint64_t bucket_elements() const;
};

}  // namespace tessera::strategies

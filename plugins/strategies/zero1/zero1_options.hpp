// The options of the `zero1` strategy ([strategy.options]) and their checks.
#pragma once

#include "tessera/c/common.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/bucket_reducer.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::strategies {

// Declarations handed to the host (key, type, default, help).
inline constexpr tessera_option_decl kZero1Options[] = {
    {"bucket_mb", TESSERA_OPT_FLOAT, "25",
     "gradient bucket capacity in MiB (a larger parameter gets a bucket of its own); also "
     "bounds the staging buffer of the parameter allgather"},
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

  // The gradient bucket plan these options describe (f32 on the wire,
  // reduce-scatter over the shard grid).
  [[nodiscard]] sdk::BucketConfig buckets() const noexcept {
    return sdk::BucketConfig{first_bucket_mb, bucket_mb, TESSERA_F32, true};
  }
};

}  // namespace tessera::strategies

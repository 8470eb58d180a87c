// The options of the `ddp` strategy ([strategy.options]) and their checks.
#pragma once

#include "tessera/c/common.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/bucket_reducer.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/strategy_options.hpp"

namespace tessera::strategies {

// Declarations handed to the host (key, type, default, help).
inline constexpr tessera_option_decl kDdpOptions[] = {
    {"bucket_mb", TESSERA_OPT_FLOAT, "25",
     "gradient bucket capacity in MiB (a larger parameter gets a bucket of its own)"},
    {"first_bucket_mb", TESSERA_OPT_FLOAT, "1",
     "capacity in MiB of the first bucket, kept small so communication starts early"},
    {"overlap", TESSERA_OPT_BOOL, "true",
     "allreduce each bucket as soon as its gradients are complete during backward; "
     "false: after the whole backward pass"},
    {"reduce_dtype", TESSERA_OPT_STRING, "f32",
     "dtype of the gradient allreduce: f32, bf16 or f16 (16-bit halves the bytes sent)"},
    sdk::kHierarchyOption,
    sdk::kRanksPerNodeOption,
    sdk::kActivationCheckpointingOption,
};

// bucket_mb, first_bucket_mb, overlap, hierarchy and ranks_per_node
// (sdk::BucketOptions) and the wire dtype of the allreduce.
struct DdpOptions : sdk::BucketOptions {
  tessera_dtype reduce_dtype = TESSERA_F32;  // wire dtype of the allreduce

  // Reads and checks the options. Throws tessera::Error (invalid argument)
  // naming the option when reduce_dtype is not one of f32, bf16, f16
  // (listing them), or else what sdk::BucketOptions::read refuses.
  static DdpOptions read(const sdk::Options& options) {
    DdpOptions o;
    o.reduce_dtype = sdk::read_comm_dtype(options, "reduce_dtype");
    static_cast<sdk::BucketOptions&>(o) = sdk::BucketOptions::read(options, "ddp");
    return o;
  }

  // The bucket plan and wire dtype these options describe.
  [[nodiscard]] sdk::BucketConfig buckets() const noexcept {
    return sdk::BucketConfig{first_bucket_mb, bucket_mb, reduce_dtype};
  }
};

}  // namespace tessera::strategies

// Options of the `ddp` strategy (see ddp_options.hpp).
#include "ddp_options.hpp"

#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/grad_buckets.hpp"

namespace tessera::strategies {

DdpOptions DdpOptions::read(const sdk::Options& options) {
  DdpOptions o;
  o.bucket_mb = options.get_float("bucket_mb");
  o.first_bucket_mb = options.get_float("first_bucket_mb");
  o.overlap = options.get_bool("overlap");
  o.reduce_dtype = sdk::parse_comm_dtype(options.get_string("reduce_dtype"), "reduce_dtype");
  // Both capacities must be positive and finite; the conversion checks it.
  (void)sdk::bucket_elements(o.bucket_mb, "bucket_mb");
  (void)sdk::bucket_elements(o.first_bucket_mb, "first_bucket_mb");
  return o;
}

}  // namespace tessera::strategies

// Options of the `zero1` strategy (see zero1_options.hpp).
#include "zero1_options.hpp"

#include "tessera/sdk/grad_buckets.hpp"

namespace tessera::strategies {

Zero1Options Zero1Options::read(const sdk::Options& options) {
  Zero1Options o;
  o.bucket_mb = options.get_float("bucket_mb");
  o.first_bucket_mb = options.get_float("first_bucket_mb");
  o.overlap = options.get_bool("overlap");
  // Both capacities must be positive and finite; the conversion checks it.
  (void)sdk::bucket_elements(o.bucket_mb, "bucket_mb");
  (void)sdk::bucket_elements(o.first_bucket_mb, "first_bucket_mb");
  return o;
}

uint64_t Zero1Options::first_bucket_elements() const {
  return sdk::bucket_elements(first_bucket_mb, "first_bucket_mb");
}

uint64_t Zero1Options::bucket_elements() const {
  return sdk::bucket_elements(bucket_mb, "bucket_mb");
}

}  // namespace tessera::strategies

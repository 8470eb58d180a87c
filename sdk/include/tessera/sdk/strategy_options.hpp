// Reading the options the strategy plugins have in common: the wire dtype of
// a collective (`reduce_dtype`, `param_dtype`) and the gradient bucket sizes
// and overlap switch of the bucketed strategies (ddp, zero1). Each plugin
// still declares its options itself (key, type, default, help); these read
// the resolved values and check them with the same messages everywhere.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/c/common.h"
#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/grad_buckets.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::sdk {

// The dtype of string option `key` (f32, bf16 or f16; see
// parse_comm_dtype). Throws tessera::Error (invalid argument) naming the
// option, its value and the valid values otherwise, the message prefixed
// with "<who>: " when `who` is given.
inline tessera_dtype read_comm_dtype(const Options& options, const char* key,
                                     const char* who = nullptr) {
  const std::string value = options.get_string(key);
  if (who == nullptr) return parse_comm_dtype(value, key);
  try {
    return parse_comm_dtype(value, key);
  } catch (const Error& e) {
    throw Error(e.status(), ::tessera::detail::concat(who, ": ", e.what()));
  }
}

// The options `bucket_mb` (float, MiB of every bucket after the first),
// `first_bucket_mb` (float, MiB of the first bucket) and `overlap` (bool,
// start buckets during the backward) of a bucketed strategy.
struct BucketOptions {
  double bucket_mb = 25.0;       // capacity of every bucket after the first, MiB
  double first_bucket_mb = 1.0;  // capacity of the first bucket, MiB
  bool overlap = true;           // start buckets during backward

  // Reads the three options. Throws tessera::Error (invalid argument)
  // naming the option when a bucket size is not a positive finite number.
  static BucketOptions read(const Options& options) {
    BucketOptions o;
    o.bucket_mb = options.get_float("bucket_mb");
    o.first_bucket_mb = options.get_float("first_bucket_mb");
    o.overlap = options.get_bool("overlap");
    (void)o.bucket_elements();
    (void)o.first_bucket_elements();
    return o;
  }

  // Capacities of the first and of every later bucket in f32 elements (see
  // sdk::bucket_elements). Same failure as read().
  [[nodiscard]] uint64_t first_bucket_elements() const {
    return ::tessera::sdk::bucket_elements(first_bucket_mb, "first_bucket_mb");
  }
  [[nodiscard]] uint64_t bucket_elements() const {
    return ::tessera::sdk::bucket_elements(bucket_mb, "bucket_mb");
  }
};

}  // namespace tessera::sdk

// Reading the options the strategy plugins have in common: the wire dtype of
// a collective (`reduce_dtype`, `param_dtype`), the gradient bucket sizes
// and overlap switch of the bucketed strategies (ddp, zero1) and the
// activation checkpointing interval every strategy takes. Each plugin still
// declares its options itself (key, type, default, help; the checkpointing
// declaration is shared, kActivationCheckpointingOption); these read the
// resolved values and check them with the same messages everywhere.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/c/common.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/grad_buckets.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::sdk {

// The declaration of `activation_checkpointing` (int, default 0: off), which
// every strategy lists among its options; read it with
// read_activation_checkpointing. docs/strategies/README.md, "Activation
// checkpointing".
inline constexpr tessera_option_decl kActivationCheckpointingOption = {
    "activation_checkpointing", TESSERA_OPT_INT, "0",
    "checkpoint every N-th unit: drop its saved activations after its forward and recompute "
    "them before its backward (units N-1, 2N-1, ...; never the last unit); 0: off"};

// The value of `activation_checkpointing`: 0 (off) or the interval N >= 1.
// Throws tessera::Error (invalid argument) naming the option and its value
// when it is negative, the message prefixed with "<who>: " when `who` is
// given. (The host refuses a value that is not an integer.)
inline int64_t read_activation_checkpointing(const Options& options, const char* who = nullptr) {
  const int64_t every = options.get_int(kActivationCheckpointingOption.key);
  TESSERA_CHECK(every >= 0, TESSERA_ERR_INVALID_ARGUMENT, who != nullptr ? who : "",
                who != nullptr ? ": " : "", "option 'activation_checkpointing' = ", every,
                " must be >= 0 (0: off; N: checkpoint every N-th unit)");
  return every;
}

// Whether unit `unit` of a range of units ending before unit `end` (the
// model, or a pipeline chunk) is checkpointed with an interval of `every`
// units (0: none): (unit + 1) % every == 0, and not the range's last unit.
[[nodiscard]] inline bool checkpointed_unit(int64_t every, int32_t unit, int32_t end) noexcept {
  return every > 0 && unit + 1 < end && (static_cast<int64_t>(unit) + 1) % every == 0;
}

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

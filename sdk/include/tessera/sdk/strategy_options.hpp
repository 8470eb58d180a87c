// Reading the options the strategy plugins have in common: the wire dtype of
// a collective (`reduce_dtype`, `param_dtype`), the gradient bucket sizes
// and overlap switch of the bucketed strategies (ddp, zero1) and the
// activation checkpointing interval every strategy takes. Each plugin still
// declares its options itself (key, type, default, help; the checkpointing
// declaration is shared, kActivationCheckpointingOption); these read the
// resolved values and check them with the same messages everywhere.
#pragma once

#include <cstdint>
#include <cstdlib>
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

// The declarations of `hierarchy` and `ranks_per_node`, which the bucketed
// strategies (ddp, zero1) list among their options; BucketOptions reads
// them. docs/strategies/README.md, "Hierarchical allreduce".
inline constexpr tessera_option_decl kHierarchyOption = {
    "hierarchy", TESSERA_OPT_STRING, "none",
    "gradient reduction over the ranks: none (one flat collective over the world) or node "
    "(inside each node, then across nodes on 1/ranks_per_node of each bucket per rank, then "
    "inside the node again)"};
inline constexpr tessera_option_decl kRanksPerNodeOption = {
    "ranks_per_node", TESSERA_OPT_INT, "0",
    "ranks per node for hierarchy = \"node\" (nodes are consecutive blocks of ranks; must "
    "divide the world size); 0: LOCAL_WORLD_SIZE, else OMPI_COMM_WORLD_LOCAL_SIZE, else one node"};

// The options `bucket_mb` (float, MiB of every bucket after the first),
// `first_bucket_mb` (float, MiB of the first bucket), `overlap` (bool,
// start buckets during the backward), `hierarchy` (string, "none" or
// "node") and `ranks_per_node` (int, 0: from the environment) of a
// bucketed strategy.
struct BucketOptions {
  double bucket_mb = 25.0;       // capacity of every bucket after the first, MiB
  double first_bucket_mb = 1.0;  // capacity of the first bucket, MiB
  bool overlap = true;           // start buckets during backward
  bool hierarchy = false;        // hierarchy = "node"
  int64_t ranks_per_node = 0;    // as given; 0: from the environment

  // Reads the options. Throws tessera::Error (invalid argument) naming the
  // option when a bucket size is not a positive finite number, hierarchy
  // is neither "none" nor "node", or ranks_per_node is negative; the
  // message prefixed with "<who>: " when `who` is given.
  static BucketOptions read(const Options& options, const char* who = nullptr) {
    BucketOptions o;
    o.bucket_mb = options.get_float("bucket_mb");
    o.first_bucket_mb = options.get_float("first_bucket_mb");
    o.overlap = options.get_bool("overlap");
    const std::string hierarchy = options.get_string(kHierarchyOption.key);
    const char* prefix = who != nullptr ? who : "";
    const char* sep = who != nullptr ? ": " : "";
    TESSERA_CHECK(hierarchy == "none" || hierarchy == "node", TESSERA_ERR_INVALID_ARGUMENT, prefix,
                  sep, "option 'hierarchy' = '", hierarchy, "' is not one of none, node");
    o.hierarchy = hierarchy == "node";
    o.ranks_per_node = options.get_int(kRanksPerNodeOption.key);
    TESSERA_CHECK(o.ranks_per_node >= 0, TESSERA_ERR_INVALID_ARGUMENT, prefix, sep,
                  "option 'ranks_per_node' = ", o.ranks_per_node,
                  " must be >= 1 (0: from the environment)");
    (void)o.bucket_elements();
    (void)o.first_bucket_elements();
    return o;
  }

  // The ranks per node of a world of `world_size` ranks with hierarchy =
  // "node" (1 without it: no split): ranks_per_node when given, else the first of
  // LOCAL_WORLD_SIZE and OMPI_COMM_WORLD_LOCAL_SIZE that is set, else the
  // whole world. Throws tessera::Error (invalid argument) naming the option
  // (or the environment variable), its value and the world size when it
  // does not divide the world size or is not a positive integer.
  // A ranks_per_node given with hierarchy = "none" is checked the same way
  // (and unused).
  [[nodiscard]] int32_t node_size(int32_t world_size, const char* who = nullptr) const {
    if (!hierarchy && ranks_per_node == 0) return 1;
    const char* prefix = who != nullptr ? who : "";
    const char* sep = who != nullptr ? ": " : "";
    std::string source = "option 'ranks_per_node'";
    int64_t size = ranks_per_node;
    if (size == 0) {
      size = world_size;
      for (const char* var : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
        const char* value = std::getenv(var);  // NOLINT(concurrency-mt-unsafe): read only
        if (value == nullptr || *value == '\0') continue;
        char* end = nullptr;
        size = std::strtoll(value, &end, 10);
        source = ::tessera::detail::concat("environment variable ", var);
        TESSERA_CHECK(*end == '\0' && size >= 1, TESSERA_ERR_INVALID_ARGUMENT, prefix, sep, source,
                      " = '", value,
                      "' is not a positive integer (hierarchy = 'node' takes the ranks per node "
                      "from it when option 'ranks_per_node' is 0)");
        break;
      }
    }
    TESSERA_CHECK(world_size % size == 0, TESSERA_ERR_INVALID_ARGUMENT, prefix, sep, source, " = ",
                  size, " does not divide the world size ", world_size,
                  " (hierarchy = 'node': nodes are equal blocks of consecutive ranks)");
    return hierarchy ? static_cast<int32_t>(size) : 1;
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

// Options, environment and process-wide settings of the nccl backend. No
// CUDA here: the settings are resolved (and their errors tested) on machines
// without a GPU.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/c/backend.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/store.hpp"

namespace tessera::nccl_backend {

// The options the plugin declares ([backend.options] keys).
inline constexpr tessera_option_decl kOptions[] = {
    sdk::kStoreOption,
    sdk::kStoreDirOption,
    sdk::kRedisHostOption,
    sdk::kRedisPortOption,
    sdk::kRunIdOption,
    {"stage_host", TESSERA_OPT_BOOL, "false",
     "accept host (cpu) buffers by copying them through device staging buffers; without it "
     "host buffers are refused"},
    {"watchdog_ms", TESSERA_OPT_INT, "10",
     "how often the watchdog asks the communicators for asynchronous errors and looks for late "
     "operations (1..10000)"},
};

using sdk::EnvLookup;
using sdk::process_environment;

// Everything the backend needs, resolved once when it is created.
struct Settings {
  int32_t rank = 0;            // from RANK
  int32_t world_size = 1;      // from WORLD_SIZE
  int32_t local_rank = 0;      // from LOCAL_RANK (0 when unset): the CUDA device
  int64_t timeout_ms = 60000;  // default per operation and for connecting; < 0: none
  sdk::StoreSettings store;
  bool stage_host = false;
  int64_t watchdog_ms = 10;

  // Resolves the options, the host's config and the environment. Throws
  // Error(INVALID_ARGUMENT) naming the option, variable or field that is
  // missing or wrong.
  static Settings from(const sdk::Options& options, const tessera_backend_config& config,
                       const EnvLookup& env);

  // The timeout of an operation whose args say `requested` (0: the default,
  // < 0: none).
  [[nodiscard]] int64_t resolve_timeout(int64_t requested) const noexcept {
    return requested == 0 ? timeout_ms : requested;
  }
};

// Refuses buffers the backend cannot take, before any CUDA call: host (cpu)
// buffers unless `stage_host`, and device buffers of another device than
// `device`. Throws Error(INVALID_ARGUMENT) "nccl: <coll> on rank r of n: ...".
// Runs after sdk::validate_coll_args.
void check_buffer_devices(const tessera_coll_args& args, int32_t rank, int32_t size,
                          bool stage_host, int32_t device);

}  // namespace tessera::nccl_backend

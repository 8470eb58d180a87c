// Options, environment and process-wide settings of the gloo backend.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/c/backend.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/store.hpp"

namespace tessera::gloo_backend {

// The options the plugin declares ([backend.options] keys).
inline constexpr tessera_option_decl kOptions[] = {
    sdk::kStoreOption,
    sdk::kStoreDirOption,
    sdk::kRedisHostOption,
    sdk::kRedisPortOption,
    sdk::kRunIdOption,
    {"interface", TESSERA_OPT_STRING, "",
     "network interface the TCP transport binds to (e.g. \"lo\", \"eth0\"); overrides hostname"},
    {"hostname", TESSERA_OPT_STRING, "",
     "address or host name the TCP transport binds to; empty: 127.0.0.1 when $MASTER_ADDR is "
     "unset or loopback, else the local address that routes to $MASTER_ADDR"},
    {"algorithm", TESSERA_OPT_STRING, "auto",
     "allreduce algorithm: \"auto\", \"ring\", \"ring_chunked\", \"halving_doubling\" or "
     "\"bcube\""},
    {"auto_threshold_kb", TESSERA_OPT_INT, "4096",
     "with algorithm = \"auto\": allreduces below this many KiB use bcube, larger ones ring "
     "(0..1048576)"},
    {"probe_ms", TESSERA_OPT_INT, "1500",
     "after a failed operation, how long to wait for the other ranks to report their progress "
     "before naming the ones that did not answer (50..60000)"},
};

// Allreduce algorithms of gloo the plugin can run.
enum class Algorithm { kAuto, kRing, kRingChunked, kHalvingDoubling, kBcube };

// Name of `a` as written in the options.
const char* algorithm_name(Algorithm a) noexcept;

using sdk::EnvLookup;
using sdk::process_environment;

// Everything the backend needs, resolved once when it is created.
struct Settings {
  int32_t rank = 0;        // from RANK
  int32_t world_size = 1;  // from WORLD_SIZE
  // tessera_backend_config::joining: this process joins a running world
  // (RANK and WORLD_SIZE are not read; it starts as rank 0 of 1).
  bool joining = false;
  int64_t timeout_ms = 60000;  // default per operation and for connecting; < 0: none

  sdk::StoreSettings store;  // where ranks meet, and the run id

  std::string interface;    // bind to this interface, if set
  std::string hostname;     // else bind to this address, if set
  std::string master_addr;  // $MASTER_ADDR, may be empty
  int32_t master_port = 0;  // $MASTER_PORT, 0 if unset

  Algorithm algorithm = Algorithm::kAuto;
  uint64_t auto_threshold_bytes = uint64_t{4096} << 10;
  int64_t probe_ms = 1500;

  // Resolves the options, the host's config and the environment. Throws
  // Error(INVALID_ARGUMENT) naming the option, variable or field that is
  // missing or wrong (e.g. RANK unset: says to start the ranks with
  // `tessera launch -n N -- ...`).
  static Settings from(const sdk::Options& options, const tessera_backend_config& config,
                       const EnvLookup& env);

  // The timeout of an operation whose args say `requested` (0: the default,
  // < 0: none).
  [[nodiscard]] int64_t resolve_timeout(int64_t requested) const noexcept {
    return requested == 0 ? timeout_ms : requested;
  }

  // "TCP store at HOST:PORT (...)", "file store at DIR" or "Redis store at
  // HOST:PORT", for messages.
  [[nodiscard]] std::string store_description() const { return store.description(); }
};

}  // namespace tessera::gloo_backend

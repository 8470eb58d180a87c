// Options and process-wide settings of the in-memory backend.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "tessera/c/backend.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"

namespace tessera::inmemory {

// The options the plugin declares ([backend.options] keys).
inline constexpr tessera_option_decl kOptions[] = {
    {"block_kb", TESSERA_OPT_INT, "64",
     "block size in KiB of the allreduce/reduce data path: each block is reduced and copied out "
     "while it is still in cache (1..65536)"},
    {"stream_kb", TESSERA_OPT_INT, "32768",
     "operations whose send and recv buffers (all ranks together) reach this many KiB write "
     "their outputs with non-temporal stores that bypass the cache, saving a memory read per "
     "line; about the last-level cache size; 0 never does"},
    {"spin_us", TESSERA_OPT_INT, "20",
     "microseconds a waiting rank spins before it sleeps on a futex; 0 sleeps at once "
     "(0..1000000)"},
};

// Settings shared by every group of one backend instance.
struct Settings {
  size_t block_bytes = size_t{64} << 10;       // data-path block size
  uint64_t stream_bytes = uint64_t{32} << 20;  // streaming-store threshold; 0: never
  std::chrono::nanoseconds spin{std::chrono::microseconds(20)};
  int32_t world_size = 1;
  int64_t timeout_ms = 60000;  // default per operation; < 0: none

  // Reads and range-checks the options and the host's config. Throws
  // Error(INVALID_ARGUMENT) naming the offending option or field.
  static Settings from(const sdk::Options& options, const tessera_backend_config& config);

  // The timeout of an operation whose args say `requested` (0: the default,
  // < 0: none).
  [[nodiscard]] int64_t resolve_timeout(int64_t requested) const noexcept {
    return requested == 0 ? timeout_ms : requested;
  }
};

}  // namespace tessera::inmemory

namespace tessera::inmemory {

// What every group and communicator of one backend instance shares: the
// host services and the settings. Immutable after creation.
struct Engine {
  sdk::Host host;
  Settings settings;
};

}  // namespace tessera::inmemory

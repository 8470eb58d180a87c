// Options and process-wide settings of the mpi backend.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "tessera/c/backend.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"

namespace tessera::mpi {

// The options the plugin declares ([backend.options] keys).
inline constexpr tessera_option_decl kOptions[] = {
    {"spin_us", TESSERA_OPT_INT, "50",
     "microseconds a waiting operation polls MPI without pause before it starts yielding the "
     "core between polls (0..1000000)"},
    {"yield_us", TESSERA_OPT_INT, "10000",
     "microseconds, after spin_us, during which a waiting operation yields the core after each "
     "poll (lets other ranks sharing the core run) before it starts sleeping (0..10000000)"},
    {"max_sleep_us", TESSERA_OPT_INT, "1000",
     "longest sleep in microseconds between two polls of a long wait (after spin_us + yield_us); "
     "sleeps grow from 50 us up to it (50..100000)"},
    {"service_poll_ms", TESSERA_OPT_INT, "2",
     "milliseconds the service thread sleeps between two looks for control messages (progress "
     "queries, aborts) on the process's groups (1..1000)"},
    {"stall_query_ms", TESSERA_OPT_INT, "1500",
     "when an operation times out, how long to wait for the other ranks to say how far they "
     "got before the error is reported; 0 reports without asking (0..60000)"},
    {"chunk_elements", TESSERA_OPT_INT, "2147483647",
     "largest element count handed to one MPI call: allreduce, reduce, broadcast, send and recv "
     "of more elements are issued as several calls (1..2147483647)"},
    {"iallreduce_algorithm", TESSERA_OPT_INT, "3",
     "Open MPI (libnbc) algorithm for MPI_Iallreduce, set when the plugin starts MPI and "
     "OMPI_MCA_coll_libnbc_iallreduce_algorithm is unset: 3 reduce-scatter + allgather, 4 "
     "recursive doubling, 1 ring, 2 binomial, 0 Open MPI's own choice (0..4)"},
    {"init_timeout_ms", TESSERA_OPT_INT, "0",
     "longest wait in milliseconds for MPI_Init_thread, which returns once every process of the "
     "job has joined; past it the process exits naming the wait; 0: the backend's timeout, but "
     "at least 10000; < 0 waits forever; at most 604800000 (7 days)"},
    {"finalize", TESSERA_OPT_BOOL, "true",
     "call MPI_Finalize when the last backend of the process is destroyed, if this plugin "
     "started MPI; false leaves MPI running so a later backend in the same process can use it"},
    {"finalize_wait_ms", TESSERA_OPT_INT, "30000",
     "before MPI_Finalize, how long to wait for every rank to reach shutdown too; if they do "
     "not, MPI is left unfinalized rather than blocking on a lost peer; < 0 waits forever; at "
     "most 604800000 (7 days)"},
};

// Settings shared by every group of one backend instance.
struct Settings {
  std::chrono::nanoseconds spin{std::chrono::microseconds(50)};
  std::chrono::nanoseconds yield{std::chrono::microseconds(10000)};
  std::chrono::microseconds max_sleep{1000};
  std::chrono::milliseconds service_poll{2};
  std::chrono::milliseconds stall_query{1500};
  uint64_t chunk_elements = 2147483647;
  int32_t iallreduce_algorithm = 3;  // libnbc's numbering; 0: Open MPI's choice
  int64_t init_timeout_ms = 0;       // 0: timeout_ms, at least 10000; < 0: none
  bool finalize = true;
  int64_t finalize_wait_ms = 30000;  // < 0: no limit
  int32_t world_size = -1;           // from the config; -1: whatever mpirun started
  int64_t timeout_ms = 60000;        // default per operation; < 0: none

  // Reads and range-checks the options and the host's config. Throws
  // Error(INVALID_ARGUMENT) naming the offending option or field.
  static Settings from(const sdk::Options& options, const tessera_backend_config& config);

  // The timeout of an operation whose args say `requested` (0: the default,
  // < 0: none).
  [[nodiscard]] int64_t resolve_timeout(int64_t requested) const noexcept {
    return requested == 0 ? timeout_ms : requested;
  }

  // How long MPI_Init_thread may take (< 0: no limit): init_timeout_ms, or
  // when 0 the backend's timeout but at least 10 s (starting a job's
  // processes on a loaded machine takes longer than one operation should).
  [[nodiscard]] int64_t init_timeout() const noexcept {
    constexpr int64_t kInitFloorMs = 10000;
    if (init_timeout_ms != 0) return init_timeout_ms;
    return timeout_ms < 0 ? timeout_ms : std::max(timeout_ms, kInitFloorMs);
  }
};

}  // namespace tessera::mpi

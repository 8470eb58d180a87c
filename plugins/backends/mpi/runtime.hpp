// The MPI library as a process-wide resource: starting it, error texts, and
// finalizing it when the last backend of the process goes away.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "settings.hpp"
#include "tessera/c/common.h"
#include "tessera/sdk/host.hpp"

namespace tessera::mpi {

// "MPI_ERR_TRUNCATE: message truncated": the error class and MPI's own text
// for error code `code`.
std::string mpi_error_text(int code);

// The tessera status for MPI error code `code`: MISMATCH for truncation,
// INVALID_ARGUMENT for the argument classes, OUT_OF_MEMORY for MPI_ERR_NO_MEM,
// otherwise `fallback`.
tessera_status status_of_mpi_error(int code, tessera_status fallback) noexcept;

// Throws Error(status_of_mpi_error(rc, fallback), "<what>: MPI error <text>").
[[noreturn]] void throw_mpi(int rc, std::string_view what, tessera_status fallback);

// Throws (see throw_mpi) unless rc is MPI_SUCCESS.
inline void check_mpi(int rc, std::string_view what,
                      tessera_status fallback = TESSERA_ERR_INTERNAL) {
  if (rc != MPI_SUCCESS) throw_mpi(rc, what, fallback);
}

// Sets MPI_ERRORS_RETURN on `comm`, so that failures come back as codes.
void return_errors(MPI_Comm comm, std::string_view what);

// Polls `count` requests (MPI_Testall, paced like every wait of the
// backend) until all completed: true; or until `deadline`: false, the
// requests left pending. Throws the MPI error, naming `what`.
bool wait_requests(MPI_Request* requests, int count, const Settings& settings,
                   std::chrono::steady_clock::time_point deadline, std::string_view what);

// Where this process stands in MPI_COMM_WORLD.
struct ProcessInfo {
  int32_t rank = 0;
  int32_t size = 1;
};

// Makes MPI usable for one more backend: starts it with MPI_THREAD_MULTIPLE
// unless it is already running (then that level must have been granted),
// and creates the f16/bf16 types and reduction ops. `settings.world_size`
// (unless -1) must equal the size MPI reports. Throws Error: UNSUPPORTED when
// MPI runs with a lower thread level or was finalized already;
// INVALID_ARGUMENT when the world sizes differ or several ranks are wanted
// without a launcher; INTERNAL when MPI cannot start (the message says to
// start the program with `mpirun -np N`).
ProcessInfo acquire_runtime(const sdk::Host& host, const Settings& settings);

// Records that a peer process is known to be gone (it exited, or MPI
// reported its connection lost); MPI_Finalize is then never called.
void note_peer_lost() noexcept;

// Whether note_peer_lost was called in this process.
[[nodiscard]] bool peer_lost_noted() noexcept;

// Counts one backend less. When it was the last one, this plugin started
// MPI, `settings.finalize` is set and no peer is known lost, waits (at most
// settings.finalize_wait_ms) for every rank to get here and then calls
// MPI_Finalize; otherwise MPI is left as it is, and the reason is logged.
void release_runtime(const sdk::Host& host, const Settings& settings) noexcept;

}  // namespace tessera::mpi

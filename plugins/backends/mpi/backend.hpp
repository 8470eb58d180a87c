// The mpi backend: every rank is a process started by mpirun; collectives
// run on MPI's non-blocking calls, watched by a control service thread.
#pragma once

#include <cstdint>
#include <memory>

#include "engine.hpp"
#include "tessera/sdk/backend.hpp"

namespace tessera::mpi {

// The process-wide engine of the mpi plugin.
class MpiBackend final : public sdk::Backend {
 public:
  // Reads the options and config (INVALID_ARGUMENT for bad values), starts
  // MPI if the program has not (see acquire_runtime for its failures) and
  // the control service thread.
  MpiBackend(const sdk::Host& host, const sdk::Options& options,
             const tessera_backend_config& config);
  // Stops the service thread (sending queued failure notices first) and
  // releases MPI: the last backend of a process that started MPI finalizes
  // it, unless a peer is known lost or the ranks do not all reach shutdown
  // within finalize_wait_ms (see release_runtime).
  ~MpiBackend() override;
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;

  // Returns this process's world communicator. `rank` must be -1 or the
  // rank MPI gave the process (INVALID_ARGUMENT otherwise). Collective over
  // all processes of MPI_COMM_WORLD: it duplicates the world and exchanges
  // each rank's host name and pid; throws Error(TIMEOUT) when not every
  // rank connects within the config's timeout.
  std::unique_ptr<sdk::Comm> connect(int32_t rank) override;

 private:
  std::shared_ptr<Engine> engine_;
};

}  // namespace tessera::mpi

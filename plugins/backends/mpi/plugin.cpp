// Registration of the mpi backend plugin.
#include "backend.hpp"
#include "settings.hpp"
#include "tessera/sdk/backend.hpp"

TESSERA_REGISTER_BACKEND(tessera::mpi::MpiBackend, "mpi", "1.0.0",
                         "one rank per process over MPI (start with `mpirun -np N`); "
                         "non-blocking MPI collectives with timeouts, stall reports and aborts",
                         TESSERA_BACKEND_CAP_CPU_BUFFERS, tessera::mpi::kOptions)

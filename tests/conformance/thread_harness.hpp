// Runs a conformance case on a thread-rank backend: one thread per rank, each
// with its own world communicator.
#pragma once

#include "cases.hpp"
#include "tessera/core/comm.hpp"

namespace tessera::conformance {

// Runs `fn` on `world_size` rank threads of `backend` (which must have
// TESSERA_BACKEND_CAP_THREAD_RANKS and was created for `world_size` ranks):
// each rank connects, runs the case and releases its communicator. When a
// rank fails, the world communicator of every connected rank is aborted with
// the failure as the reason (ranks that connect later abort their own at
// once), so no rank keeps waiting for the failed one. After every thread has
// finished, the first failure is rethrown with its original type.
void run_case_on_threads(Backend& backend, int world_size, CaseFn fn, const CaseParams& params);

}  // namespace tessera::conformance

// What every rank of a run must agree on, and the check that they do.
#pragma once

#include <string>

#include "tessera/core/comm.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/train/trainer.hpp"

namespace tessera::train::detail {

// "key = value" lines, one per setting that must be the same on every rank
// (model, strategy and its resolved options, optimizer, data, steps, seed,
// logging and checkpoint cadence, collective checks) and one per plugin
// file in use (its size and a hash of its bytes). Left out: what may differ
// between hosts or ranks (run.world_size, which the backend decides; log
// level and metrics file; plugin search paths; backend options such as a
// network interface; timeouts).
std::string run_fingerprint(const Config& config, const RunPlan& plan);

// Collective, the first operation of a run on `comm`: every rank
// contributes a hash of its fingerprint; if they differ, the texts are
// exchanged and every rank throws the same Error(MISMATCH) naming the ranks
// that differ from rank 0 and the first key where the first of them does.
// With `throw_all` false only the ranks that differ from rank 0 throw (after
// ranks joined a running world: the others go on without them). Nothing
// here is compared by the checked layer (the exchange's own sizes are the
// same on every rank by construction).
void check_ranks_agree(Communicator& comm, const std::string& fingerprint, bool throw_all = true);

}  // namespace tessera::train::detail

// `bench collectives --compare-raw`: making sure, before anything is timed,
// that the backend has a raw library call (ABI 1.2 raw_post) for the op on
// every rank, so the run can time the plugin's path against it.
#pragma once

#include <string>

#include "bench_engine.hpp"
#include "tessera/core/comm.hpp"

namespace tessera::cli {

// Collective over `comm`: every rank runs the op of `spec` once through the
// raw call on buffers of the plan's smallest size (the result is not
// checked here), then the ranks agree through the normal path whether any of
// them lacks the call (Communicator::has_raw() false, or the call failing
// with UNSUPPORTED). Returns "" when every rank has it, otherwise the same
// usage message on every rank, e.g. "--compare-raw: backend 'inmemory' has
// no raw library call for allreduce"; the caller throws it as a UsageError
// (no rank needs to abort: all of them know). Any other failure of the raw
// call propagates as tessera::Error. A backend must answer UNSUPPORTED alike
// on every rank: the raw call has no timeout, so a rank that entered it
// while another refused would wait forever.
std::string check_raw_call(Communicator& comm, const BenchSpec& spec, const BenchPlan& plan);

}  // namespace tessera::cli

// The backend conformance cases: plain functions that every rank of a group
// calls with its own world communicator. A case issues operations, verifies
// every result against exact expectations and throws (tessera::Error or
// std::runtime_error, see check.hpp) with a precise message on the first
// mismatch. No test framework is involved, so any driver can run them: the
// gtest front end with ranks as threads, or a multi-process driver with one
// process per rank.
//
// Contract for drivers: every rank of the world calls the same case with the
// same CaseParams; the communicator's default operation timeout should be
// short (seconds) so that a broken backend fails instead of hanging; a case
// leaves the world communicator usable when it returns normally.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tessera/core/comm.hpp"

namespace tessera::conformance {

struct CaseParams {
  // Element counts exercised by every collective: zero, one, small primes,
  // values not divisible by the group size, a few thousand.
  std::vector<uint64_t> counts{0, 1, 2, 3, 7, 13, 3001};
  // One large count, used for f32 allreduce and broadcast only; 0 skips it.
  uint64_t large_count = (uint64_t{1} << 20) + 3;
  // Operation timeout of the timeout case (ranks wait this long for a rank
  // that never arrives).
  std::chrono::milliseconds short_timeout{300};
  // Upper bound for loops that poll Work::test(); a guard against hangs, not
  // a performance assertion.
  std::chrono::milliseconds poll_limit{30000};
};

// Signature of a case. `comm` is the calling rank's world communicator.
using CaseFn = void (*)(Communicator& comm, const CaseParams& params);

// A case as listed in the table.
struct CaseInfo {
  std::string_view name;     // snake_case, e.g. "allreduce"
  CaseFn fn;                 // the case
  int min_ranks;             // drivers skip it for smaller groups
  std::string_view summary;  // one line
};

// Every case, in a stable order.
std::span<const CaseInfo> all_cases() noexcept;

// Reductions (cases_reduce.cpp).
void allreduce(Communicator& comm, const CaseParams& p);
void allreduce_large(Communicator& comm, const CaseParams& p);
void reduce(Communicator& comm, const CaseParams& p);
void reduce_scatter(Communicator& comm, const CaseParams& p);

// Data movement (cases_data.cpp).
void broadcast(Communicator& comm, const CaseParams& p);
void allgather(Communicator& comm, const CaseParams& p);
void gather(Communicator& comm, const CaseParams& p);
void scatter(Communicator& comm, const CaseParams& p);
void alltoall(Communicator& comm, const CaseParams& p);

// Point to point (cases_p2p.cpp); need at least two ranks.
void send_recv_ring(Communicator& comm, const CaseParams& p);
void send_recv_ordered(Communicator& comm, const CaseParams& p);
void send_recv_tags(Communicator& comm, const CaseParams& p);

// Ordering and non-blocking work (cases_nonblocking.cpp).
void barrier(Communicator& comm, const CaseParams& p);
void nonblocking(Communicator& comm, const CaseParams& p);
void blocking_after_nonblocking(Communicator& comm, const CaseParams& p);

// Sub-groups (cases_split.cpp).
void split(Communicator& comm, const CaseParams& p);

// The host's checked layer (cases_checked.cpp); needs at least two ranks.
void collective_mismatch(Communicator& comm, const CaseParams& p);

// Failure paths (cases_failure.cpp).
void invalid_arguments(Communicator& comm, const CaseParams& p);
void timeout(Communicator& comm, const CaseParams& p);
void abort_propagation(Communicator& comm, const CaseParams& p);

// Cross-rank agreement (cases_agreement.cpp).
void bitwise_agreement(Communicator& comm, const CaseParams& p);

}  // namespace tessera::conformance

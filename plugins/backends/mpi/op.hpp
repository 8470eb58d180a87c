// One operation as MPI sees it: building the MPI arguments from tessera's
// buffer conventions (in place, staging, chunking), starting the
// non-blocking MPI calls, and testing them.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backoff.hpp"
#include "tessera/c/backend.h"

namespace tessera::mpi {

class Group;

// Internal operation type for the presence check that precedes a split.
inline constexpr tessera_coll_type kCollSplit = TESSERA_COLL_TYPE_COUNT;

// A started operation: its MPI requests and what must happen when they
// complete. Reused by a communicator's blocking operations (reset keeps the
// allocations), owned by the work of a non-blocking one.
struct OpState {
  tessera_coll_type coll = TESSERA_COLL_BARRIER;
  uint64_t seq = 0;   // 1-based number: collectives of the group, or messages to/from peer
  int32_t peer = -1;  // SEND, RECV
  int32_t tag = 0;    // SEND, RECV
  tessera_dtype dtype = TESSERA_U8;
  uint64_t chunk = 0;          // elements per MPI call of a chunked operation
  uint64_t total = 0;          // elements of a chunked operation
  void* avg_result = nullptr;  // AVG: the result to divide by the group size when done
  uint64_t avg_count = 0;
  Clock::time_point started{};
  int64_t timeout_ms = -1;  // the operation's own timeout; < 0: none
  Deadline deadline = Deadline::max();
  Clock::time_point next_liveness_check{};  // see progress.hpp
  std::vector<MPI_Request> requests;
  size_t next = 0;                 // requests before this one have completed
  std::vector<std::byte> staging;  // copy of a send buffer that overlaps recv

  // Clears everything but keeps the vectors' storage.
  void reset() noexcept;
  // True while some request has not completed.
  [[nodiscard]] bool pending() const noexcept { return next < requests.size(); }
};

// "allreduce #12", "send #3 to rank 2 (tag 5)", "recv #1 from rank 0 (tag 0)",
// "split #4".
std::string op_label(const OpState& op);

// The MPI arguments of one operation once in-place forms and staging are
// decided: `send` may be MPI_IN_PLACE; `count` is the element count of one
// MPI call (the per-rank block n of backend.h, or the whole buffer for the
// element-wise operations, before chunking).
struct Plan {
  const void* send = nullptr;
  void* recv = nullptr;
  uint64_t count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
};

// Builds the plan for validated `args` on `group`. Copies the send buffer
// into `staging` when it overlaps recv in a way MPI does not allow, and for a
// broadcast root whose recv differs from send, copies send into recv (the
// broadcast then sends from recv).
Plan make_plan(const Group& group, const tessera_coll_args& args, std::vector<std::byte>& staging);

// Starts validated `args` on `group` into `op` (reset, with coll/seq/peer/
// tag/started/deadline already set): the matching non-blocking MPI call, or
// several for an element-wise operation larger than the chunk_elements
// option. Throws Error: UNSUPPORTED when a per-rank block exceeds what one
// MPI call can take (INT_MAX elements); the MPI error otherwise (requests
// already started stay in `op`).
void start_op(const Group& group, const tessera_coll_args& args, OpState& op);

// Tests `op`'s requests in order without blocking. Returns true once all
// have completed (then finishes an AVG by dividing by the group size).
// Throws Error with the MPI error (MISMATCH for truncation) or MISMATCH for
// a received message of another element count.
bool test_op(const Group& group, OpState& op);

// The name of the MPI function behind `coll` ("MPI_Iallreduce"; blocking
// form without the I), for messages.
const char* mpi_call_name(tessera_coll_type coll, bool nonblocking) noexcept;

}  // namespace tessera::mpi

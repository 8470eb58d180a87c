// How one rank of the example_threads backend carries out an operation.
//
// Collectives publish the caller's arguments (and so its buffer pointers) in
// the group, meet at a first barrier, let each rank compute its own result by
// reading the peers' published buffers into a private scratch buffer, meet at
// a second barrier (after which nobody reads a peer's buffer any more) and
// then copy the scratch into the caller's recv buffer. The scratch makes
// in-place calls (send.data == recv.data) safe without special cases.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <tessera/c/backend.h>
#include <tessera/sdk/host.hpp>

#include "group.hpp"

namespace example_threads {

// What an operation needs to know about the calling rank's communicator.
struct RankContext {
  std::shared_ptr<Group> group;
  int32_t rank = 0;         // in the group
  int32_t world_rank = 0;   // for log lines and memory accounting
  int64_t timeout_ms = 0;   // used when an operation passes timeout_ms == 0
  bool check_calls = true;  // compare every rank's call before running it
  tessera::sdk::Host host{nullptr};

  // The deadline of an operation started now with `op_timeout_ms`.
  [[nodiscard]] Deadline deadline(int64_t op_timeout_ms) const {
    return Deadline::after(op_timeout_ms == 0 ? timeout_ms : op_timeout_ms);
  }
};

// Runs collective `args` (already checked with validate_coll_args; not send
// or recv) for the calling rank until it is complete. `what` names it in
// error messages. Throws tessera::Error: TIMEOUT naming the ranks that did
// not arrive, PEER_LOST once the group is aborted, MISMATCH when the ranks
// called different operations (with check_calls: or with different counts,
// dtypes, ops or roots).
void run_collective(const RankContext& ctx, const tessera_coll_args& args, const std::string& what);

// Collective split of the group: ranks with the same `color` (>= 0) form a
// new group ordered by `key`, then by rank. Returns the new group and the
// caller's rank in it, or {nullptr, -1} for color < 0. Throws like
// run_collective.
std::pair<std::shared_ptr<Group>, int32_t> run_split(const RankContext& ctx, int32_t color,
                                                     int32_t key, const std::string& what);

}  // namespace example_threads

// What a rank says when an operation did not finish in time: it asks the
// peers the operation waits on how far they got, checks whether those that
// do not answer still exist, and words the result with sdk::describe_stall.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/c/common.h"

namespace tessera::mpi {

class Group;
struct OpState;

struct StallReport {
  tessera_status status = TESSERA_ERR_TIMEOUT;  // PEER_LOST when a peer is known gone
  std::string message;
};

// Builds the report for `op` on `group` after `waited_ms`: for a collective
// every other member is asked how many collectives it posted on the group;
// for a send or recv only the peer, about the messages between the two. A
// peer that does not answer within the stall_query_ms option is reported as
// not answering, or as lost when it ran on this host and its process is
// gone (which also makes the backend skip MPI_Finalize). Never throws for a
// silent peer; may throw std::bad_alloc.
StallReport stall_report(const std::shared_ptr<Group>& group, const OpState& op, int64_t waited_ms);

}  // namespace tessera::mpi

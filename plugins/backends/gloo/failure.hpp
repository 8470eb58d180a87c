// Turning a gloo exception into the error a user can act on.
//
// gloo says "Timed out waiting 300ms for recv operation to complete" or
// "Connection closed by peer [127.0.0.1]:4242". The rank that hit it asks the
// other members over the control channel how many operations they have
// posted on the group (waiting at most the `probe_ms` option), classifies
// each as arrived, behind, silent or lost, and words the result with
// sdk::describe_stall, e.g. "allreduce #12 on group 'world' (4 ranks) timed
// out after 300 ms: rank 3 has not posted it yet (posted 11 of 12); ranks 1,
// 2 had arrived". The group is failed with that error, so later operations
// fail at once with it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "engine.hpp"
#include "group.hpp"
#include "tessera/c/backend.h"
#include "tessera/sdk/error.hpp"

namespace tessera::gloo_backend {

// The operation that failed.
struct OpInfo {
  tessera_coll_type coll = TESSERA_COLL_ALLREDUCE;
  uint64_t seq = 0;   // collectives: number on the group; send/recv: n-th towards `peer`
  int32_t peer = -1;  // send/recv: group rank of the peer
  int32_t tag = -1;   // send/recv
  std::string label;  // optional name instead of the collective's ("split")
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

// The error `op` fails with after gloo threw `what` while running it on
// `group`. Returns the abort error if the group was (or turns out to have
// been) aborted, the group's earlier error if it had already failed (or
// fails within twice `probe_ms`, when another operation's failure had
// already broken the group's sockets), and otherwise records the stall
// report as the group's error. Breaks the
// group's sockets so that peers waiting on this rank fail promptly too.
Error explain_failure(Engine& engine, Group& group, const OpInfo& op, const std::string& what);

}  // namespace tessera::gloo_backend

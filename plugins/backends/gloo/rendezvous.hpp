// Forming a gloo context for a group of ranks through the store: wait until
// every member has arrived, connect the full mesh of pairs, and learn which
// socket and which remote endpoint belong to each peer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/device.h>

#include "sockets.hpp"
#include "store.hpp"

namespace tessera::gloo_backend {

// What a group needs to know about its connected context.
struct Connection {
  std::shared_ptr<gloo::Context> context;
  // By group rank: the peer's end of this rank's connection to it, in gloo's
  // spelling, so transport errors ("closed by peer [ip]:port") name a rank.
  std::vector<std::string> peer_endpoints;
  // The sockets behind the pairs, to fail them on abort.
  PairSockets sockets;
};

// How to form one group.
struct GroupAddress {
  std::string prefix;  // store key namespace unique to this group in this run
  std::string name;    // for messages: "world", "split 1 colour 0 of world"
  int32_t rank = 0;    // of this process in the group
  int32_t size = 1;
};

// "0, 1, 3": group ranks for messages and store values.
std::string rank_list(const std::vector<int32_t>& ranks);
// "rank 2" or "ranks 1, 3".
std::string ranks_phrase(const std::vector<int32_t>& ranks);

// Writes this rank's arrival key under `where.prefix` and waits until every
// member's is present. Throws Error(TIMEOUT) naming the ranks that never
// arrived, the store and the group after `timeout_ms` (< 0: waits forever).
void await_members(Store& store, const GroupAddress& where, int64_t timeout_ms);

// Connects the full mesh of `where` (after await_members) with gloo's
// rendezvous through a PrefixStore on `store`, then exchanges endpoints with
// an alltoall on the new context. `timeout_ms` bounds connecting and becomes
// the pairs' own timeout (< 0: none); gloo itself waits up to five times it
// for a pair's first connection. Throws Error(TIMEOUT / PEER_LOST) naming
// the group and the store; Error(INVALID_ARGUMENT) when keys of this run
// already exist in the store (a reused run id).
//
// While it connects, this rank beats through `beat_store` (its own
// connection to the same store; null: no heartbeat): a counter under
// `<prefix>/beat/<rank>` raised every 100 ms, and `<prefix>/left/<rank>`
// once it stops connecting. When connecting fails, the members that
// neither beat for a while nor left are named as stopped while connecting
// (killed or frozen), as PEER_LOST, whatever gloo's own message says.
Connection connect_group(Store& store, std::unique_ptr<Store> beat_store, const GroupAddress& where,
                         const std::shared_ptr<gloo::transport::Device>& device,
                         int64_t timeout_ms);

}  // namespace tessera::gloo_backend

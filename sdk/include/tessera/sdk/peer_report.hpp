// Wording of the error a process-based backend raises when an operation did
// not complete in time or a peer went away: which collective, on which group,
// and what is known of every other rank. Shared by the mpi and gloo plugins
// so that users (and the conformance suite, which looks for "timed out" and
// the missing rank's number) read the same sentence whatever the engine.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tessera/sdk/error.hpp"

namespace tessera::sdk {

// What a rank that gave up waiting learnt about one peer of the group.
struct PeerProgress {
  enum class State {
    kArrived,   // the peer had posted this operation too (it waits on someone else)
    kBehind,    // the peer answered: it has not posted this operation yet
    kNoAnswer,  // the peer did not answer in time: dead, hung or outside the backend
    kLost,      // the transport reported the peer gone (connection closed, process exited)
  };
  int32_t rank = -1;  // rank in the group
  State state = State::kNoAnswer;
  uint64_t posted = 0;  // kArrived/kBehind: operations the peer had posted on the group
  std::string detail;   // optional: host, pid or the transport's own words
};

// "allreduce #12 on group 'world' (4 ranks) timed out after 300 ms: rank 3 has
// not posted it yet (posted 11 of 12); rank 2 did not answer (...)" — or
// "... failed after 1000 ms: rank 1 is lost [...]" when a peer is known gone. `what`
// names the operation ("allreduce #12"), `group` the group ("world" or
// "split 2 of world"), `seq` the operation's 1-based sequence number on the
// group. Peers that arrived are summarised, the others listed one by one.
inline std::string describe_stall(std::string_view what, std::string_view group, int32_t size,
                                  int64_t waited_ms, uint64_t seq,
                                  std::span<const PeerProgress> peers) {
  std::string out(what);
  out += " on group '";
  out += group;
  out += "' (";
  out += std::to_string(size);
  bool lost = false;
  for (const PeerProgress& p : peers) lost = lost || p.state == PeerProgress::State::kLost;
  out += lost ? " ranks) failed after " : " ranks) timed out after ";
  out += std::to_string(waited_ms);
  out += " ms";
  std::string arrived;
  std::string missing;
  for (const PeerProgress& p : peers) {
    if (p.state == PeerProgress::State::kArrived) {
      if (!arrived.empty()) arrived += ", ";
      arrived += std::to_string(p.rank);
      continue;
    }
    missing += "; rank ";
    missing += std::to_string(p.rank);
    switch (p.state) {
      case PeerProgress::State::kBehind:
        missing += " has not posted it yet (posted ";
        missing += std::to_string(p.posted);
        missing += " of ";
        missing += std::to_string(seq);
        missing += ")";
        break;
      case PeerProgress::State::kNoAnswer:
        missing += " did not answer (lost, hung, or busy outside the backend)";
        break;
      default:
        missing += " is lost";
        break;
    }
    if (!p.detail.empty()) {
      missing += " [";
      missing += p.detail;
      missing += "]";
    }
  }
  if (!missing.empty()) {
    out += ":";
    out += missing.substr(1);
  }
  if (!arrived.empty()) {
    out += "; ranks ";
    out += arrived;
    out += " had arrived";
  }
  return out;
}

// The status a stall report travels with: PEER_LOST when some peer is known
// or suspected lost, TIMEOUT when every peer answered.
inline tessera_status stall_status(std::span<const PeerProgress> peers) noexcept {
  for (const PeerProgress& p : peers) {
    if (p.state == PeerProgress::State::kLost) return TESSERA_ERR_PEER_LOST;
  }
  return TESSERA_ERR_TIMEOUT;
}

}  // namespace tessera::sdk

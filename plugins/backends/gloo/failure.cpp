#include "failure.hpp"

#include <algorithm>
#include <optional>
#include <vector>

#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/peer_report.hpp"

namespace tessera::gloo_backend {
namespace {

using State = sdk::PeerProgress::State;

// gloo prefixes its messages with "[./gloo/transport/tcp/pair.cc:598] ".
std::string without_location(const std::string& what) {
  if (what.starts_with("[") && what.find("] ") != std::string::npos) {
    return what.substr(what.find("] ") + 2);
  }
  return what;
}

std::string describe_op(const OpInfo& op) {
  if (op.coll == TESSERA_COLL_SEND) {
    return detail::concat("send #", op.seq, " to rank ", op.peer, " (tag ", op.tag, ")");
  }
  if (op.coll == TESSERA_COLL_RECV) {
    return detail::concat("recv #", op.seq, " from rank ", op.peer, " (tag ", op.tag, ")");
  }
  return detail::concat(op.label.empty() ? std::string(coll_name(op.coll)) : op.label, " #",
                        op.seq);
}

// How far a peer that answered got with `op`: the number of matching
// operations it posted.
uint64_t progress_of(const OpInfo& op, const PeerReport& r) {
  if (op.coll == TESSERA_COLL_SEND) return r.recvs_from_asker;
  if (op.coll == TESSERA_COLL_RECV) return r.sends_to_asker;
  return r.collectives;
}

}  // namespace

Error explain_failure(Engine& engine, Group& group, const OpInfo& op, const std::string& what) {
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - op.start)
                          .count();
  if (auto earlier = group.error()) return *earlier;
  const bool expired = group.take_expired();
  if (!expired && group.sockets_broken()) {
    // Another operation of this group failed first and broke its sockets,
    // which is what ended this one (its gloo message names a peer that did
    // nothing wrong). That operation's report, once it has asked the peers,
    // is this one's error: reporting this one's own view instead would race
    // with it to fail the group, and could win with a wrong cause.
    const auto wait = std::chrono::milliseconds(2 * engine.settings.probe_ms);
    if (auto first = group.await_error(std::chrono::steady_clock::now() + wait)) return *first;
  }
  // A peer the transport names is only a suspect: it may have closed its
  // side on purpose because it failed first. Our own shutdown names peers
  // too, so nothing is read from the text after it.
  std::optional<int32_t> named;
  if (!group.sockets_broken()) named = group.rank_in_error(what);
  group.break_sockets();

  std::vector<int32_t> peers;
  if (op.coll == TESSERA_COLL_SEND || op.coll == TESSERA_COLL_RECV) {
    peers.push_back(op.peer);
  } else {
    for (int32_t r = 0; r < group.size(); ++r) {
      if (r != group.rank()) peers.push_back(r);
    }
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(engine.settings.probe_ms);
  const std::vector<PeerReport> reports = engine.control->ask(group, peers, deadline);

  std::vector<sdk::PeerProgress> progress;
  std::string first_failure;
  for (size_t i = 0; i < peers.size(); ++i) {
    const PeerReport& r = reports[i];
    sdk::PeerProgress p;
    p.rank = peers[i];
    if (r.answered && r.state == PeerReport::State::kAborted) {
      group.abort(r.text, "rank " + std::to_string(peers[i]));
      return *group.error();
    }
    if (r.answered) {
      p.posted = progress_of(op, r);
      p.state = p.posted >= op.seq ? State::kArrived : State::kBehind;
      if (r.state == PeerReport::State::kUnknown) p.detail = "it has no such group open";
      if (r.state == PeerReport::State::kFailed && first_failure.empty()) {
        first_failure = detail::concat("rank ", peers[i], " reported: ", r.text);
      }
    } else if (r.lost || named == peers[i]) {
      p.state = State::kLost;
      p.detail = r.lost ? "its process is gone (connection closed)"
                        : "the transport reported its connection closed";
    } else {
      p.state = State::kNoAnswer;
    }
    progress.push_back(std::move(p));
  }
  std::string message = sdk::describe_stall(describe_op(op), group.identity().name, group.size(),
                                            waited, op.seq, progress);
  // A peer's own failure is the likely cause only when no peer is missing.
  const bool all_arrived = std::all_of(progress.begin(), progress.end(),
                                       [](const auto& p) { return p.state == State::kArrived; });
  if (all_arrived && !first_failure.empty()) message += "; " + first_failure;
  message += expired ? " (its deadline passed; the group's connections were shut down)"
                     : " (gloo: " + without_location(what) + ")";
  return group.fail(Error(sdk::stall_status(progress), message));
}

}  // namespace tessera::gloo_backend

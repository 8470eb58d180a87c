#include "stall.hpp"

#include <optional>
#include <vector>

#include "backoff.hpp"
#include "control.hpp"
#include "group.hpp"
#include "op.hpp"
#include "runtime.hpp"
#include "tessera/sdk/peer_report.hpp"

namespace tessera::mpi {

StallReport stall_report(const std::shared_ptr<Group>& group, const OpState& op,
                         int64_t waited_ms) {
  std::vector<int32_t> peers;
  QueryKind kind = QueryKind::kCollectives;
  if (op.coll == TESSERA_COLL_SEND) {
    peers.push_back(op.peer);
    kind = QueryKind::kReceivedFromMe;
  } else if (op.coll == TESSERA_COLL_RECV) {
    peers.push_back(op.peer);
    kind = QueryKind::kSentToMe;
  } else {
    for (int32_t r = 0; r < group->size(); ++r) {
      if (r != group->rank()) peers.push_back(r);
    }
  }

  Engine& engine = group->engine();
  const auto gone = [&](int32_t r) { return engine.process_gone(group->member(r)); };
  const auto deadline = Clock::now() + engine.settings().stall_query;
  std::vector<std::optional<uint64_t>> answers(peers.size());
  if (engine.settings().stall_query.count() > 0) {
    answers = engine.control().query(group, kind, peers, deadline, gone);
  }

  std::vector<sdk::PeerProgress> progress;
  progress.reserve(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    sdk::PeerProgress p;
    p.rank = peers[i];
    const Identity& id = group->member(p.rank);
    if (answers[i]) {
      p.posted = *answers[i];
      p.state = p.posted >= op.seq ? sdk::PeerProgress::State::kArrived
                                   : sdk::PeerProgress::State::kBehind;
    } else if (gone(p.rank)) {
      p.state = sdk::PeerProgress::State::kLost;
      p.detail = detail::concat("its process ", id.pid, " on ", id.host, " has exited");
      note_peer_lost();
    } else {
      p.state = sdk::PeerProgress::State::kNoAnswer;
      p.detail = detail::concat("process ", id.pid, " on ", id.host);
    }
    progress.push_back(std::move(p));
  }
  StallReport report;
  report.status = sdk::stall_status(progress);
  report.message =
      sdk::describe_stall(op_label(op), group->name(), group->size(), waited_ms, op.seq, progress);
  return report;
}

}  // namespace tessera::mpi

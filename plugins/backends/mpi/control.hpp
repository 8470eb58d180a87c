// The control side channel: one service thread per backend that answers
// other ranks' questions about this rank's progress and delivers failure
// notices, over each group's control communicator.
//
// MPI itself cannot tell a waiting rank why an operation does not finish,
// nor interrupt a peer's wait. The service thread polls (MPI_Improbe, never a
// blocking receive) every attached group's control communicator, pausing
// `service_poll_ms` between rounds, and handles three messages:
//   query    "how many collectives have you posted on this group / how many
//            messages have you sent me / how many receives from me have you
//            posted?"; answered at once from the group's counters;
//   reply    the answer, handed to the thread that asked (see query());
//   failure  "this group failed: <reason>"; marks the group failed (and, for
//            an abort, the groups split from it) so pending and later
//            operations on this rank fail with PEER_LOST and that reason.
#pragma once

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "settings.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::mpi {

class Group;

// Tag of every control message; control communicators carry nothing else.
inline constexpr int kControlTag = 7;

// What a progress query asks a peer.
enum class QueryKind : int32_t {
  kCollectives = 0,    // collectives (and splits) the peer posted on the group
  kSentToMe = 1,       // messages the peer sent to the asking rank
  kReceivedFromMe = 2  // receives from the asking rank the peer posted
};

class ControlService {
 public:
  // Starts the service thread. `world_rank` is used in log lines.
  ControlService(const sdk::Host& host, const Settings& settings, int32_t world_rank);
  // Stops the thread (see stop()).
  ~ControlService();
  ControlService(const ControlService&) = delete;
  ControlService& operator=(const ControlService&) = delete;

  // Starts answering on `group`'s control communicator.
  void attach(const std::shared_ptr<Group>& group);
  // Stops answering on `group`; messages already queued for it are still
  // sent, and the service keeps the group alive until they are.
  void detach(const Group* group);

  // Sends "failed: <reason>" to every other member of `group`, from the
  // calling thread, and waits up to 200 ms for the sends to leave (they are
  // small, so MPI completes them locally at once); a process that exits
  // right after still delivers them. `tree` makes the receivers fail the
  // groups split from it too (an abort). Never throws.
  void notify_failure(const std::shared_ptr<Group>& group, const std::string& reason,
                      bool tree) noexcept;

  // Asks each rank of `peers` (ranks in `group`) `kind` and waits for the
  // answers until `deadline`, or until every peer still silent satisfies
  // `gone` (checked every 20 ms). Returns one entry per peer, in order;
  // nullopt where no answer came.
  std::vector<std::optional<uint64_t>> query(const std::shared_ptr<Group>& group, QueryKind kind,
                                             const std::vector<int32_t>& peers,
                                             std::chrono::steady_clock::time_point deadline,
                                             const std::function<bool(int32_t)>& gone);

  // True when a control message for `group` has arrived and is not handled
  // yet (one MPI_Iprobe; cheap enough for every operation's start).
  [[nodiscard]] static bool has_message(const Group& group) noexcept;
  // Has the service thread run a full round over every group now, so that
  // messages already delivered are handled when it returns (waits at most
  // 100 ms). Called by an operation's thread that saw has_message(): a
  // failure notice that arrived before the operation then fails it instead
  // of letting it join an operation the other ranks gave up on.
  void drain();

  // Sends what is queued (waiting up to `flush` for the sends to finish) and
  // stops the thread. Idempotent.
  void stop(std::chrono::milliseconds flush) noexcept;

 private:
  struct Outgoing;
  struct InFlight;
  struct PendingQuery {
    const Group* group = nullptr;
    std::vector<int32_t> peers;
    std::vector<std::optional<uint64_t>> answers;
  };

  void run();
  void send_queued(std::vector<Outgoing>& queued, std::vector<InFlight>& in_flight);
  void receive_all(const std::shared_ptr<Group>& group, std::vector<InFlight>& in_flight);
  void handle(const std::shared_ptr<Group>& group, int32_t source, const std::vector<char>& bytes,
              std::vector<InFlight>& in_flight);
  void reap(std::vector<InFlight>& in_flight, bool give_up);
  void enqueue(Outgoing message);

  sdk::Host host_;
  Settings settings_;
  int32_t world_rank_;
  std::mutex mu_;
  std::condition_variable wake_;        // the service thread: work queued or stop
  std::condition_variable answered_;    // query(): a reply arrived
  std::condition_variable round_done_;  // drain(): a round finished
  bool stop_ = false;
  bool hurry_ = false;   // drain() wants a round now
  uint64_t rounds_ = 0;  // rounds finished
  std::vector<std::shared_ptr<Group>> groups_;
  std::vector<Outgoing> outbox_;
  std::map<uint64_t, PendingQuery> queries_;
  uint64_t next_query_ = 0;
  std::chrono::milliseconds flush_{0};
  std::thread thread_;
};

}  // namespace tessera::mpi

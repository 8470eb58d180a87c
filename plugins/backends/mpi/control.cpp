#include "control.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "group.hpp"
#include "runtime.hpp"

namespace tessera::mpi {
namespace {

// Longest failure reason sent; longer ones are cut (messages stay eager).
constexpr size_t kMaxReason = 2000;
// Messages taken from one group per round, so one busy group cannot starve
// the others.
constexpr int kMaxPerRound = 64;

enum class MsgKind : int32_t { kQuery = 1, kReply = 2, kFailure = 3, kAbort = 4 };

// Fixed start of every control message; a failure notice appends its text.
struct Header {
  int32_t kind = 0;
  int32_t query = 0;   // QueryKind of a query or reply
  uint64_t id = 0;     // query id, echoed by the reply
  uint64_t value = 0;  // the reply's answer; a failure notice: 1 when a peer process is lost
};

std::vector<char> encode(MsgKind kind, int32_t query, uint64_t id, uint64_t value,
                         std::string_view text = {}) {
  const Header h{static_cast<int32_t>(kind), query, id, value};
  std::vector<char> bytes(sizeof h + std::min(text.size(), kMaxReason));
  std::memcpy(bytes.data(), &h, sizeof h);
  std::memcpy(bytes.data() + sizeof h, text.data(), bytes.size() - sizeof h);
  return bytes;
}

}  // namespace

struct ControlService::Outgoing {
  std::shared_ptr<Group> group;
  int32_t dest = -1;
  std::vector<char> bytes;
};

struct ControlService::InFlight {
  std::shared_ptr<Group> group;  // keeps the control communicator alive
  std::vector<char> bytes;       // moving the vector keeps its storage in place
  MPI_Request request = MPI_REQUEST_NULL;
};

ControlService::ControlService(const sdk::Host& host, const Settings& settings, int32_t world_rank)
    : host_(host), settings_(settings), world_rank_(world_rank) {
  thread_ = std::thread([this] { run(); });
}

ControlService::~ControlService() { stop(std::chrono::milliseconds(0)); }

void ControlService::attach(const std::shared_ptr<Group>& group) {
  const std::lock_guard lock(mu_);
  groups_.push_back(group);
}

void ControlService::detach(const Group* group) {
  const std::lock_guard lock(mu_);
  std::erase_if(groups_, [&](const auto& g) { return g.get() == group; });
}

void ControlService::enqueue(Outgoing message) {
  {
    const std::lock_guard lock(mu_);
    if (stop_) return;
    outbox_.push_back(std::move(message));
  }
  wake_.notify_one();
}

void ControlService::notify_failure(const std::shared_ptr<Group>& group, const std::string& reason,
                                    bool tree) noexcept {
  try {
    const MsgKind kind = tree ? MsgKind::kAbort : MsgKind::kFailure;
    std::vector<InFlight> sends;
    for (int32_t r = 0; r < group->size(); ++r) {
      if (r == group->rank()) continue;
      // The receivers must also know that a process is gone: their shutdown
      // then skips MPI_Finalize instead of waiting finalize_wait_ms for it.
      InFlight f{group, encode(kind, 0, 0, peer_lost_noted() ? 1 : 0, reason), MPI_REQUEST_NULL};
      if (MPI_Isend(f.bytes.data(), static_cast<int>(f.bytes.size()), MPI_BYTE, r, kControlTag,
                    group->ctrl(), &f.request) == MPI_SUCCESS) {
        sends.push_back(std::move(f));
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    reap(sends, false);
    while (!sends.empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      reap(sends, false);
    }
    reap(sends, true);
  } catch (...) {  // NOLINT(bugprone-empty-catch): peers then learn of it by their own timeout
  }
}

std::vector<std::optional<uint64_t>> ControlService::query(
    const std::shared_ptr<Group>& group, QueryKind kind, const std::vector<int32_t>& peers,
    std::chrono::steady_clock::time_point deadline, const std::function<bool(int32_t)>& gone) {
  uint64_t id = 0;
  {
    const std::lock_guard lock(mu_);
    if (stop_) return std::vector<std::optional<uint64_t>>(peers.size());
    id = ++next_query_;
    queries_[id] = PendingQuery{group.get(), peers, {}};
    queries_[id].answers.resize(peers.size());
    for (const int32_t peer : peers) {
      outbox_.push_back(
          Outgoing{group, peer, encode(MsgKind::kQuery, static_cast<int32_t>(kind), id, 0)});
    }
  }
  wake_.notify_one();
  std::unique_lock lock(mu_);
  for (;;) {
    const PendingQuery& q = queries_[id];
    std::vector<int32_t> silent;
    for (size_t i = 0; i < q.peers.size(); ++i) {
      if (!q.answers[i]) silent.push_back(q.peers[i]);
    }
    const auto now = std::chrono::steady_clock::now();
    if (silent.empty() || now >= deadline) break;
    lock.unlock();
    const bool all_gone = std::all_of(silent.begin(), silent.end(), gone);
    lock.lock();
    if (all_gone) break;
    answered_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(20)));
  }
  std::vector<std::optional<uint64_t>> answers = std::move(queries_[id].answers);
  queries_.erase(id);
  return answers;
}

bool ControlService::has_message(const Group& group) noexcept {
  int flag = 0;
  return MPI_Iprobe(MPI_ANY_SOURCE, kControlTag, group.ctrl(), &flag, MPI_STATUS_IGNORE) ==
             MPI_SUCCESS &&
         flag != 0;
}

void ControlService::drain() {
  std::unique_lock lock(mu_);
  // The round running now may have passed the group already: wait for the
  // next one to finish.
  const uint64_t target = rounds_ + 2;
  hurry_ = true;
  wake_.notify_one();
  round_done_.wait_for(lock, std::chrono::milliseconds(100),
                       [&] { return stop_ || rounds_ >= target; });
}

void ControlService::stop(std::chrono::milliseconds flush) noexcept {
  {
    const std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
    flush_ = flush;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
  std::vector<std::shared_ptr<Group>> dropped;  // released outside the lock
  std::vector<Outgoing> unsent;
  const std::lock_guard lock(mu_);
  dropped.swap(groups_);
  unsent.swap(outbox_);
}

void ControlService::run() {
  std::vector<Outgoing> queued;
  std::vector<InFlight> in_flight;
  std::vector<std::shared_ptr<Group>> groups;
  for (;;) {
    bool stopping = false;
    {
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, settings_.service_poll,
                     [&] { return stop_ || hurry_ || !outbox_.empty(); });
      hurry_ = false;
      queued.swap(outbox_);
      groups = groups_;
      stopping = stop_;
    }
    send_queued(queued, in_flight);
    if (stopping) break;
    for (const auto& g : groups) receive_all(g, in_flight);
    groups.clear();
    reap(in_flight, false);
    {
      const std::lock_guard lock(mu_);
      ++rounds_;
    }
    round_done_.notify_all();
  }
  round_done_.notify_all();
  const auto deadline = std::chrono::steady_clock::now() + flush_;
  reap(in_flight, false);
  while (!in_flight.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    reap(in_flight, false);
  }
  reap(in_flight, true);
}

void ControlService::send_queued(std::vector<Outgoing>& queued, std::vector<InFlight>& in_flight) {
  for (Outgoing& m : queued) {
    InFlight f{std::move(m.group), std::move(m.bytes), MPI_REQUEST_NULL};
    const int rc = MPI_Isend(f.bytes.data(), static_cast<int>(f.bytes.size()), MPI_BYTE, m.dest,
                             kControlTag, f.group->ctrl(), &f.request);
    if (rc != MPI_SUCCESS) {
      host_.log(TESSERA_LOG_DEBUG, world_rank_, "mpi: control message to rank ", m.dest,
                " of group '", f.group->name(), "' could not be sent: ", mpi_error_text(rc));
      continue;
    }
    in_flight.push_back(std::move(f));
  }
  queued.clear();
}

void ControlService::receive_all(const std::shared_ptr<Group>& group,
                                 std::vector<InFlight>& in_flight) {
  for (int k = 0; k < kMaxPerRound; ++k) {
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status{};
    if (MPI_Improbe(MPI_ANY_SOURCE, kControlTag, group->ctrl(), &flag, &message, &status) !=
            MPI_SUCCESS ||
        flag == 0) {
      return;
    }
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    std::vector<char> bytes(static_cast<size_t>(std::max(count, 0)));
    if (MPI_Mrecv(bytes.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return;
    }
    handle(group, status.MPI_SOURCE, bytes, in_flight);
  }
}

void ControlService::handle(const std::shared_ptr<Group>& group, int32_t source,
                            const std::vector<char>& bytes, std::vector<InFlight>& in_flight) {
  Header h;
  if (bytes.size() < sizeof h) return;
  std::memcpy(&h, bytes.data(), sizeof h);
  switch (static_cast<MsgKind>(h.kind)) {
    case MsgKind::kQuery: {
      uint64_t value = 0;
      switch (static_cast<QueryKind>(h.query)) {
        case QueryKind::kCollectives:
          value = group->collectives();
          break;
        case QueryKind::kSentToMe:
          value = group->sends_to(source);
          break;
        case QueryKind::kReceivedFromMe:
          value = group->recvs_from(source);
          break;
      }
      std::vector<Outgoing> reply;
      reply.push_back(Outgoing{group, source, encode(MsgKind::kReply, h.query, h.id, value)});
      send_queued(reply, in_flight);
      return;
    }
    case MsgKind::kReply: {
      {
        const std::lock_guard lock(mu_);
        const auto it = queries_.find(h.id);
        if (it == queries_.end() || it->second.group != group.get()) return;
        PendingQuery& q = it->second;
        for (size_t i = 0; i < q.peers.size(); ++i) {
          if (q.peers[i] == source) q.answers[i] = h.value;
        }
      }
      answered_.notify_all();
      return;
    }
    case MsgKind::kFailure:
    case MsgKind::kAbort: {
      const std::string reason(bytes.begin() + static_cast<std::ptrdiff_t>(sizeof h), bytes.end());
      if (h.value != 0) note_peer_lost();
      if (static_cast<MsgKind>(h.kind) == MsgKind::kAbort) {
        group->fail_tree(reason);
      } else {
        group->fail(TESSERA_ERR_PEER_LOST, reason);
      }
      return;
    }
  }
}

void ControlService::reap(std::vector<InFlight>& in_flight, bool give_up) {
  std::erase_if(in_flight, [&](InFlight& f) {
    int done = 0;
    if (MPI_Test(&f.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return true;
    if (done != 0) return true;
    if (!give_up) return false;
    // A point-to-point send may be released while pending; its buffer is
    // deliberately leaked, as MPI may still read it.
    MPI_Request_free(&f.request);
    new std::vector<char>(std::move(f.bytes));  // NOLINT: intentional leak, see above
    return true;
  });
}

}  // namespace tessera::mpi

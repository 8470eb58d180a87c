#include "control.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>
#include <utility>

#include "executor.hpp"
#include "forever.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::gloo_backend {
namespace {

constexpr uint64_t kSlot = 0x7e55000000000001ULL;  // the only slot of the control context
constexpr uint32_t kMagic = 0x54474331;            // "TGC1"

enum : uint32_t { kQuery = 1, kAnswer = 2, kAbort = 3 };

}  // namespace

struct Control::Message {
  uint32_t magic = kMagic;
  uint32_t type = 0;
  uint64_t group = 0;    // group key
  uint64_t request = 0;  // kQuery/kAnswer: the asker's request id
  int32_t from = -1;     // world rank of the sender
  int32_t asker = -1;    // kQuery: the asker's rank in the group
  int32_t state = 0;     // kAnswer: PeerReport::State
  uint32_t text_len = 0;
  uint64_t collectives = 0;
  uint64_t sends_to_asker = 0;
  uint64_t recvs_from_asker = 0;
  char text[440] = {};

  void set_text(const std::string& s) noexcept {
    text_len = static_cast<uint32_t>(std::min(s.size(), sizeof text));
    std::memcpy(text, s.data(), text_len);
  }
  [[nodiscard]] std::string get_text() const {
    return std::string(text, std::min<size_t>(text_len, sizeof text));
  }
};

struct Control::Outgoing {
  std::unique_ptr<Message> message;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  int32_t to = -1;
};

Control::Control(const sdk::Host& host, Connection connection)
    : host_(host),
      connection_(std::move(connection)),
      lost_(static_cast<size_t>(connection_.context->size), false) {
  const auto& context = connection_.context;
  for (int r = 0; r < context->size; ++r) {
    if (r != context->rank) others_.push_back(r);
  }
  if (others_.empty()) return;
  inbox_ = std::make_unique<Message>();
  inbox_buffer_ = context->createUnboundBuffer(inbox_.get(), sizeof(Message));
  // The reaper first: when the service thread cannot start, it alone has
  // to be stopped (a joinable thread must never be destroyed).
  reaper_ = start_thread([this] { reap(); }, "the control channel's send thread");
  try {
    service_ = start_thread([this] { serve(); }, "the control channel's receive thread");
  } catch (const Error&) {
    {
      const std::lock_guard<std::mutex> lock(out_mu_);
      stopping_ = true;
    }
    out_cv_.notify_all();
    reaper_.join();
    throw;
  }
}

Control::~Control() {
  if (!service_.joinable()) return;
  {
    const std::lock_guard<std::mutex> lock(inbox_mu_);
    serving_ = false;
    inbox_buffer_->abortWaitRecv();
  }
  service_.join();
  {
    const std::lock_guard<std::mutex> lock(out_mu_);
    stopping_ = true;
    if (reaping_ != nullptr) reaping_->abortWaitSend();
  }
  out_cv_.notify_all();
  reaper_.join();
  // Close the pairs before the buffers gloo may still refer to are freed.
  connection_.context->closeConnections();
}

void Control::add(const std::shared_ptr<Group>& group) {
  std::optional<std::pair<std::string, int32_t>> early;
  const uint64_t key = group->identity().key;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    groups_[key] = group;
    if (const auto it = early_aborts_.find(key); it != early_aborts_.end()) {
      early = it->second;
      early_aborts_.erase(it);
    }
  }
  if (early) {
    const auto& ranks = group->identity().world_ranks;
    const auto at = std::find(ranks.begin(), ranks.end(), early->second);
    group->abort(early->first, "rank " + std::to_string(at - ranks.begin()));
  }
}

void Control::remove(uint64_t key) noexcept {
  const std::lock_guard<std::mutex> lock(mu_);
  groups_.erase(key);
}

bool Control::post(int32_t world_rank, const Message& message) noexcept {
  try {
    auto out = std::make_unique<Outgoing>();
    out->message = std::make_unique<Message>(message);
    out->buffer = connection_.context->createUnboundBuffer(out->message.get(), sizeof(Message));
    out->to = world_rank;
    out->buffer->send(world_rank, kSlot, 0, sizeof(Message));
    {
      const std::lock_guard<std::mutex> lock(out_mu_);
      if (stopping_) return false;
      outgoing_.push_back(std::move(out));
    }
    out_cv_.notify_one();
    return true;
  } catch (const std::exception& e) {
    host_.log(TESSERA_LOG_DEBUG, connection_.context->rank, "gloo control: message to rank ",
              world_rank, " failed: ", e.what());
    mark_lost(world_rank);
    return false;
  }
}

void Control::mark_lost(int32_t world_rank) noexcept {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    lost_[static_cast<size_t>(world_rank)] = true;
  }
  cv_.notify_all();
}

void Control::send_abort(const Group& group, const std::string& reason) noexcept {
  Message m;
  m.type = kAbort;
  m.group = group.identity().key;
  m.from = connection_.context->rank;
  m.set_text(reason);
  for (const int32_t w : group.identity().world_ranks) {
    if (w != connection_.context->rank) post(w, m);
  }
}

std::vector<PeerReport> Control::ask(const Group& group, const std::vector<int32_t>& peers,
                                     std::chrono::steady_clock::time_point deadline) {
  Request request;
  for (const int32_t p : peers) {
    request.world_ranks.push_back(group.identity().world_ranks[static_cast<size_t>(p)]);
  }
  request.reports.resize(peers.size());
  uint64_t id = 0;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    id = ++next_request_;
    requests_[id] = request;
  }
  Message q;
  q.type = kQuery;
  q.group = group.identity().key;
  q.request = id;
  q.from = connection_.context->rank;
  q.asker = group.rank();
  for (const int32_t w : request.world_ranks) post(w, q);

  std::unique_lock<std::mutex> lock(mu_);
  Request& r = requests_[id];
  const auto settled = [&] {
    for (size_t i = 0; i < r.reports.size(); ++i) {
      if (!r.reports[i].answered && !lost_[static_cast<size_t>(r.world_ranks[i])]) return false;
    }
    return true;
  };
  cv_.wait_until(lock, deadline, settled);
  std::vector<PeerReport> reports = std::move(r.reports);
  for (size_t i = 0; i < reports.size(); ++i) {
    if (!reports[i].answered) reports[i].lost = lost_[static_cast<size_t>(r.world_ranks[i])];
  }
  requests_.erase(id);
  return reports;
}

void Control::serve() {
  for (;;) {
    gloo::transport::UnboundBuffer* inbox = nullptr;
    {
      const std::lock_guard<std::mutex> lock(inbox_mu_);
      if (!serving_) return;
      inbox = inbox_buffer_.get();
    }
    int32_t source = -1;
    bool received = false;
    try {
      inbox->recv(others_, kSlot, 0, sizeof(Message));
      // Ends by an abort from our side or a peer's failure, never by gloo's
      // timeout (which would close every pair of the control context).
      received = inbox->waitRecv(&source, kForever);
    } catch (const std::exception& e) {
      // A peer died with a message announced but not delivered: its broken
      // pair fails the receive. Stop listening to it and receive again,
      // into a fresh buffer (gloo keeps the failure in the old one). The
      // peer is the one gloo's message names, else every peer whose
      // connection is gone.
      std::vector<int32_t> dead;
      const auto named = rank_named_in(e.what(), connection_.peer_endpoints);
      if (named && std::find(others_.begin(), others_.end(), *named) != others_.end()) {
        dead.push_back(*named);
      } else {
        for (const int32_t r : others_) {
          if (connection_.sockets.closed(r)) dead.push_back(r);
        }
      }
      if (dead.empty()) {
        host_.log(TESSERA_LOG_WARN, connection_.context->rank,
                  "gloo control: receiving control messages failed (", e.what(),
                  ") and no peer's connection is closed; stall reports and abort propagation are "
                  "off from now on");
        return;
      }
      for (const int32_t r : dead) {
        std::erase(others_, r);
        mark_lost(r);
      }
      if (others_.empty()) return;
      const std::lock_guard<std::mutex> lock(inbox_mu_);
      if (!serving_) return;
      retired_.push_back(std::move(inbox_buffer_));
      inbox_buffer_ = connection_.context->createUnboundBuffer(inbox_.get(), sizeof(Message));
      continue;
    }
    if (!received) return;  // interrupted: stopping
    if (inbox_->magic == kMagic) handle(*inbox_);
  }
}

void Control::handle(const Message& m) {
  if (m.type == kQuery) {
    answer(m);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (m.type == kAnswer) {
    const auto it = requests_.find(m.request);
    if (it == requests_.end()) return;  // the asker gave up already
    Request& r = it->second;
    for (size_t i = 0; i < r.world_ranks.size(); ++i) {
      if (r.world_ranks[i] != m.from) continue;
      PeerReport& p = r.reports[i];
      p.answered = true;
      p.state = static_cast<PeerReport::State>(m.state);
      p.collectives = m.collectives;
      p.sends_to_asker = m.sends_to_asker;
      p.recvs_from_asker = m.recvs_from_asker;
      p.text = m.get_text();
    }
    lock.unlock();
    cv_.notify_all();
    return;
  }
  if (m.type == kAbort) {
    const auto it = groups_.find(m.group);
    std::shared_ptr<Group> group = it == groups_.end() ? nullptr : it->second.lock();
    if (!group) {
      early_aborts_[m.group] = {m.get_text(), m.from};
      return;
    }
    lock.unlock();
    const auto& ranks = group->identity().world_ranks;
    const auto at = std::find(ranks.begin(), ranks.end(), m.from);
    group->abort(m.get_text(), "rank " + std::to_string(at - ranks.begin()));
  }
}

void Control::answer(const Message& query) {
  std::shared_ptr<Group> group;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    const auto it = groups_.find(query.group);
    if (it != groups_.end()) group = it->second.lock();
  }
  Message a;
  a.type = kAnswer;
  a.group = query.group;
  a.request = query.request;
  a.from = connection_.context->rank;
  if (group) {
    a.collectives = group->collectives_posted();
    a.sends_to_asker = group->sends_posted(query.asker);
    a.recvs_from_asker = group->recvs_posted(query.asker);
    const auto error = group->error();
    a.state = static_cast<int32_t>(group->aborted()    ? PeerReport::State::kAborted
                                   : error.has_value() ? PeerReport::State::kFailed
                                                       : PeerReport::State::kHealthy);
    if (group->aborted()) {
      a.set_text(group->abort_reason());
    } else if (error) {
      a.set_text(error->what());
    }
  }
  post(query.from, a);
}

void Control::reap() {
  std::unique_lock<std::mutex> lock(out_mu_);
  for (;;) {
    out_cv_.wait(lock, [&] { return stopping_ || !outgoing_.empty(); });
    if (stopping_) return;
    std::unique_ptr<Outgoing> out = std::move(outgoing_.front());
    outgoing_.pop_front();
    reaping_ = out->buffer.get();
    lock.unlock();
    bool failed = false;
    try {
      out->buffer->waitSend(nullptr, kForever);
    } catch (const std::exception&) {
      failed = true;
    }
    lock.lock();
    reaping_ = nullptr;
    if (stopping_) {
      // Keep the message alive until the context goes: gloo may still hold it.
      outgoing_.push_back(std::move(out));
      return;
    }
    if (failed) {
      lock.unlock();
      mark_lost(out->to);
      lock.lock();
    }
  }
}

}  // namespace tessera::gloo_backend

#include "group.hpp"

#include <utility>

namespace tessera::gloo_backend {
namespace {

int64_t to_ns(std::chrono::steady_clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

uint64_t group_key(const std::string& id) noexcept {
  uint64_t h = 14695981039346656037ULL;
  for (const char c : id) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

Group::Group(GroupIdentity identity, Connection connection)
    : identity_(std::move(identity)),
      connection_(std::move(connection)),
      sends_(std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(identity_.size()))),
      recvs_(std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(identity_.size()))) {}

std::optional<int32_t> Group::rank_in_error(const std::string& text) const {
  return rank_named_in(text, connection_.peer_endpoints);
}

uint64_t Group::post_send(int32_t peer) noexcept {
  return sends_[static_cast<size_t>(peer)].fetch_add(1) + 1;
}

uint64_t Group::post_recv(int32_t peer) noexcept {
  return recvs_[static_cast<size_t>(peer)].fetch_add(1) + 1;
}

uint64_t Group::sends_posted(int32_t peer) const noexcept {
  if (peer < 0 || peer >= size()) return 0;
  return sends_[static_cast<size_t>(peer)].load();
}

uint64_t Group::recvs_posted(int32_t peer) const noexcept {
  if (peer < 0 || peer >= size()) return 0;
  return recvs_[static_cast<size_t>(peer)].load();
}

std::string Group::describe() const {
  return detail::concat("group '", identity_.name, "' (rank ", identity_.rank, " of ", size(), ")");
}

std::optional<Error> Group::error() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

std::optional<Error> Group::await_error(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  failed_.wait_until(lock, deadline, [&] { return error_.has_value(); });
  return error_;
}

std::string Group::abort_reason() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return abort_reason_;
}

void Group::throw_error() const {
  const std::lock_guard<std::mutex> lock(mu_);
  if (error_) throw *error_;
  throw Error(TESSERA_ERR_INTERNAL, describe() + " is unusable for an unknown reason");
}

Error Group::fail(const Error& error) {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (!error_) {
      error_ = error;
      state_.store(kFailed, std::memory_order_release);
    }
  }
  failed_.notify_all();
  break_sockets();
  const std::lock_guard<std::mutex> lock(mu_);
  return *error_;
}

void Group::abort(const std::string& reason, const std::string& origin) {
  std::vector<std::weak_ptr<Group>> children;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (state_.load() == kAborted) return;
    error_ = Error(TESSERA_ERR_PEER_LOST,
                   detail::concat(describe(), " was aborted by ", origin, ": ", reason));
    abort_reason_ = reason;
    state_.store(kAborted, std::memory_order_release);
    children = children_;
  }
  failed_.notify_all();
  break_sockets();
  for (const auto& weak : children) {
    if (const auto child = weak.lock()) child->abort(reason, origin);
  }
}

void Group::add_child(const std::shared_ptr<Group>& child) {
  const std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(children_, [](const std::weak_ptr<Group>& w) { return w.expired(); });
  children_.push_back(child);
}

void Group::break_sockets() noexcept {
  broken_.store(true);
  connection_.sockets.shutdown_all();
  waits_.interrupt_all();
}

void Group::watch(std::chrono::steady_clock::time_point deadline) noexcept {
  deadline_ns_.store(to_ns(deadline), std::memory_order_release);
}

bool Group::expire_if_late(std::chrono::steady_clock::time_point now) noexcept {
  const int64_t deadline = deadline_ns_.load(std::memory_order_acquire);
  if (deadline == 0 || to_ns(now) < deadline) return false;
  int64_t expected = deadline;
  if (!deadline_ns_.compare_exchange_strong(expected, 0)) return false;
  expired_.store(true);
  break_sockets();
  return true;
}

}  // namespace tessera::gloo_backend

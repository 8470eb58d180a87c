#include "group.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include <tessera/sdk/dtype.hpp>
#include <tessera/sdk/error.hpp>

namespace example_threads {

using tessera::Error;

Deadline Deadline::after(int64_t ms) {
  if (ms < 0) return Deadline{};
  return Deadline{false, Clock::now() + std::chrono::milliseconds(ms), ms};
}

Group::Group(int32_t size)
    : size_(size),
      arrived_(static_cast<size_t>(size), 0),
      slots_(static_cast<size_t>(size)),
      queues_(static_cast<size_t>(size) * static_cast<size_t>(size)),
      posted_(queues_.size()) {}

void Group::throw_if_aborted(const std::string& what) const {
  if (aborted_) {
    throw Error(TESSERA_ERR_PEER_LOST, what + ": the group was aborted: " + abort_reason_);
  }
}

std::string Group::missing_ranks() const {
  std::string out;
  for (int32_t r = 0; r < size_; ++r) {
    if (arrived_[static_cast<size_t>(r)] != 0) continue;
    out += out.empty() ? "" : ", ";
    out += std::to_string(r);
  }
  return out;
}

std::string Group::arrive_and_wait(int32_t rank, const std::string& what, const Deadline& deadline,
                                   bool abortable, const SettleHook* settle) {
  std::unique_lock<std::mutex> lock(mu_);
  if (abortable) throw_if_aborted(what);
  auto& mine = arrived_[static_cast<size_t>(rank)];
  if (mine != 0) {
    throw Error(TESSERA_ERR_INTERNAL,
                what + ": rank " + std::to_string(rank) + " is already waiting in this group");
  }
  mine = 1;
  if (++waiting_ == size_) {  // last to arrive: settle and release everyone
    verdict_ = settle != nullptr ? (*settle)(slots_) : std::string();
    std::fill(arrived_.begin(), arrived_.end(), 0);
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
    return verdict_;
  }
  const uint64_t generation = generation_;
  const auto released = [&] { return generation_ != generation || (abortable && aborted_); };
  bool in_time = true;
  if (deadline.forever) {
    cv_.wait(lock, released);
  } else {
    in_time = cv_.wait_until(lock, deadline.at, released);
  }
  if (generation_ != generation) return verdict_;  // the barrier completed
  // Withdraw, so that the ranks still to come do not count this one.
  const std::string missing = missing_ranks();
  mine = 0;
  --waiting_;
  if (!in_time) {
    const bool several = missing.find(',') != std::string::npos;
    throw Error(TESSERA_ERR_TIMEOUT, what + ": timed out after " + std::to_string(deadline.ms) +
                                         " ms waiting for " + (several ? "ranks " : "rank ") +
                                         missing + " of " + std::to_string(size_));
  }
  throw_if_aborted(what);
  throw Error(TESSERA_ERR_INTERNAL, what + ": barrier released without completing");
}

void Group::fail_recv(RecvOp& op, tessera_status status, std::string error) {
  auto& posted = posted_[pair(op.from, op.to)];
  posted.erase(std::remove_if(posted.begin(), posted.end(),
                              [&](const std::shared_ptr<RecvOp>& p) { return p.get() == &op; }),
               posted.end());
  op.status = status;
  op.error = std::move(error);
  op.done = true;
}

namespace {
// Completes `op` with `m` (mu_ held): copies the payload, or fails with
// MISMATCH when the sizes or dtypes differ.
void complete(RecvOp& op, const Message& m) {
  op.done = true;
  if (m.dtype != op.dest.dtype || m.count != op.dest.count) {
    op.status = TESSERA_ERR_MISMATCH;
    op.error = op.what + ": rank " + std::to_string(op.from) + " sent " + std::to_string(m.count) +
               " x " + std::string(tessera::dtype_name(m.dtype)) + " with tag " +
               std::to_string(op.tag) + " but the receive expects " +
               std::to_string(op.dest.count) + " x " +
               std::string(tessera::dtype_name(op.dest.dtype));
    return;
  }
  if (!m.bytes.empty()) std::memcpy(op.dest.data, m.bytes.data(), m.bytes.size());
}
}  // namespace

void Group::send(int32_t from, int32_t to, Message message) {
  const std::lock_guard<std::mutex> lock(mu_);
  throw_if_aborted("send from rank " + std::to_string(from) + " to rank " + std::to_string(to));
  auto& posted = posted_[pair(from, to)];
  const auto it =
      std::find_if(posted.begin(), posted.end(),
                   [&](const std::shared_ptr<RecvOp>& op) { return op->tag == message.tag; });
  if (it == posted.end()) {
    queues_[pair(from, to)].push_back(std::move(message));
    return;
  }
  complete(**it, message);
  posted.erase(it);
  cv_.notify_all();
}

void Group::post_recv(const std::shared_ptr<RecvOp>& op) {
  const std::lock_guard<std::mutex> lock(mu_);
  throw_if_aborted(op->what);
  auto& queue = queues_[pair(op->from, op->to)];
  const auto it =
      std::find_if(queue.begin(), queue.end(), [&](const Message& m) { return m.tag == op->tag; });
  if (it == queue.end()) {
    posted_[pair(op->from, op->to)].push_back(op);
    return;
  }
  complete(*op, *it);
  queue.erase(it);
}

bool Group::wait_recv(const std::shared_ptr<RecvOp>& op, const Deadline& until, bool expire) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto ready = [&] { return op->done || aborted_; };
  const bool in_time =
      until.forever ? (cv_.wait(lock, ready), true) : cv_.wait_until(lock, until.at, ready);
  if (op->done) return true;
  if (aborted_) {
    fail_recv(*op, TESSERA_ERR_PEER_LOST, op->what + ": the group was aborted: " + abort_reason_);
  } else if (!in_time && expire) {
    fail_recv(*op, TESSERA_ERR_TIMEOUT,
              op->what + ": nothing arrived from rank " + std::to_string(op->from) + " with tag " +
                  std::to_string(op->tag) + " within " + std::to_string(until.ms) + " ms");
  }
  return op->done;
}

void Group::abort(const std::string& reason) {
  const std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) {
    aborted_ = true;
    abort_reason_ = reason;
  }
  cv_.notify_all();
}

}  // namespace example_threads

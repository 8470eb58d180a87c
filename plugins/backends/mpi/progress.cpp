#include "progress.hpp"

#include <chrono>
#include <string>
#include <utility>

#include "control.hpp"
#include "group.hpp"
#include "runtime.hpp"
#include "stall.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::mpi {
namespace {

// Hands an operation with MPI requests still pending to the engine, which
// keeps it (and the memory MPI may still use) alive.
void abandon(Group& group, std::unique_ptr<OpState>& slot) {
  if (slot && slot->pending()) group.engine().abandon(std::move(slot));
}

[[noreturn]] void throw_group_failure(const std::shared_ptr<Group>& group,
                                      std::unique_ptr<OpState>& slot) {
  const std::string what = op_label(*slot);
  abandon(*group, slot);
  group->throw_failure(what);
}

[[noreturn]] void expire(const std::shared_ptr<Group>& group, std::unique_ptr<OpState>& slot,
                         Clock::time_point now) {
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - slot->started).count();
  StallReport report = stall_report(group, *slot, waited);
  abandon(*group, slot);
  fail_group(group, report.status,
             detail::concat("rank ", group->rank(), " gave up waiting: ", report.message), false);
  throw Error(report.status, report.message);
}

// Handles an Error thrown by test_op.
[[noreturn]] void mpi_failed(const std::shared_ptr<Group>& group, std::unique_ptr<OpState>& slot,
                             const Error& e) {
  abandon(*group, slot);
  if (e.status() != TESSERA_ERR_MISMATCH && e.status() != TESSERA_ERR_INVALID_ARGUMENT) {
    note_peer_lost();
    fail_group(group, TESSERA_ERR_PEER_LOST,
               detail::concat("rank ", group->rank(), " lost a peer: ", e.what()), false);
  }
  throw e;
}

// A wait checks whether its peers' processes still exist once it has run
// this long, and again at this interval (a kill(pid, 0) per same-host peer).
constexpr auto kLivenessAfter = std::chrono::seconds(1);
constexpr auto kLivenessEvery = std::chrono::milliseconds(500);

// True when a peer `op` waits on ran on this host and its process is gone;
// checks at most every kLivenessEvery.
bool peer_process_gone(const Group& group, OpState& op, Clock::time_point now) {
  if (op.next_liveness_check == Clock::time_point{}) {
    op.next_liveness_check = op.started + kLivenessAfter;
  }
  if (now < op.next_liveness_check) return false;
  op.next_liveness_check = now + kLivenessEvery;
  const Engine& engine = group.engine();
  if (op.coll == TESSERA_COLL_SEND || op.coll == TESSERA_COLL_RECV) {
    return engine.process_gone(group.member(op.peer));
  }
  for (int32_t r = 0; r < group.size(); ++r) {
    if (r != group.rank() && engine.process_gone(group.member(r))) return true;
  }
  return false;
}

bool test_checked(const std::shared_ptr<Group>& group, std::unique_ptr<OpState>& slot) {
  try {
    return test_op(*group, *slot);
  } catch (const Error& e) {
    mpi_failed(group, slot, e);
  }
}

}  // namespace

void fail_group(const std::shared_ptr<Group>& group, tessera_status status,
                const std::string& reason, bool tree) noexcept {
  try {
    const bool first = tree ? group->fail_tree(reason) : group->fail(status, reason);
    if (first) group->engine().control().notify_failure(group, reason, tree);
  } catch (...) {  // NOLINT(bugprone-empty-catch): only allocation can fail here
  }
}

WaitEnd drive(const std::shared_ptr<Group>& group, std::unique_ptr<OpState>& slot,
              Clock::time_point start, Deadline user_deadline) {
  const Settings& s = group->engine().settings();
  Backoff backoff(start, s.spin, s.yield, s.max_sleep);
  OpState& op = *slot;
  for (;;) {
    if (test_checked(group, slot)) return WaitEnd::kDone;
    if (group->failed()) throw_group_failure(group, slot);
    const Clock::time_point now = Clock::now();
    if (now >= op.deadline || peer_process_gone(*group, op, now)) expire(group, slot, now);
    if (now >= user_deadline) return WaitEnd::kUserDeadline;
    backoff.pause(now);
  }
}

bool poll_once(const std::shared_ptr<Group>& group, std::unique_ptr<OpState>& slot) {
  if (test_checked(group, slot)) return true;
  if (group->failed()) throw_group_failure(group, slot);
  const Clock::time_point now = Clock::now();
  if (now >= slot->deadline || peer_process_gone(*group, *slot, now)) expire(group, slot, now);
  return false;
}

}  // namespace tessera::mpi

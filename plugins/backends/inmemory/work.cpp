#include "work.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>

#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::inmemory {

namespace {

// How often a wait re-checks a receive still queued behind other operations
// (its deadline is only known once it is posted).
constexpr auto kQueuedRecvPoll = std::chrono::milliseconds(10);

bool is_recv(const Task& task) noexcept {
  return task.kind == Task::Kind::kOp && task.args.coll == TESSERA_COLL_RECV;
}

}  // namespace

void expire_recv(Group& group, int32_t rank, RecvRequest& request) {
  if (request.done->done() || Clock::now() < request.deadline) return;
  // Not withdrawn: a sender took it (it completes once copied) or it failed.
  if (!group.mailbox(rank).withdraw(request)) return;
  const std::string reason =
      detail::concat(request.what, " timed out after ", request.timeout_ms,
                     " ms: ", group.rank_label(request.source), " sent no matching message");
  if (group.fail(TESSERA_ERR_TIMEOUT, reason)) {
    request.done->finish(TESSERA_ERR_TIMEOUT, reason);
  } else {
    request.done->finish(
        TESSERA_ERR_PEER_LOST,
        detail::concat(request.what, " failed: the group is broken: ", group.fault().reason()));
  }
}

void await_recv(Group& group, int32_t rank, RecvRequest& request) {
  if (!request.done->wait(request.deadline, group.spin())) {
    expire_recv(group, rank, request);
    request.done->wait(Deadline::max(), group.spin());
  }
  request.done->rethrow();
}

void InMemoryWork::wait(int64_t timeout_ms) {
  const Deadline user = timeout_ms >= 0 ? deadline_after(timeout_ms) : Deadline::max();
  const bool recv = is_recv(*task_);
  for (;;) {
    const std::shared_ptr<RecvRequest> request = recv ? task_->request() : nullptr;
    Deadline until = user;
    if (request) {
      until = std::min(until, request->deadline);
    } else if (recv) {
      until = std::min(until, Clock::now() + kQueuedRecvPoll);
    }
    if (task_->done->wait(until, group_->spin())) break;
    if (request && Clock::now() >= request->deadline) {
      expire_recv(*group_, rank_, *request);
      task_->done->wait(Deadline::max(), group_->spin());
      break;
    }
    if (Clock::now() >= user) {
      const std::string_view what = task_->kind == Task::Kind::kSplit ? std::string_view("split")
                                                                      : coll_name(task_->args.coll);
      throw Error(
          TESSERA_ERR_TIMEOUT,
          detail::concat("non-blocking ", what, " on ", group_->rank_label(rank_), " of group of ",
                         group_->size(), " still running after ", timeout_ms, " ms"));
    }
  }
  task_->done->rethrow();
}

bool InMemoryWork::test() {
  if (!task_->done->done() && is_recv(*task_)) {
    if (const auto request = task_->request()) expire_recv(*group_, rank_, *request);
  }
  if (!task_->done->done()) return false;
  task_->done->rethrow();
  return true;
}

}  // namespace tessera::inmemory

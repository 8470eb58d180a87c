// Handle on a posted non-blocking operation.
#pragma once

#include <cstdint>
#include <memory>

#include "executor.hpp"
#include "group.hpp"
#include "tessera/sdk/backend.hpp"

namespace tessera::inmemory {

// What post() returns for a non-blocking operation; shares the task with
// the executor, so it stays valid after its communicator is destroyed.
class InMemoryWork final : public sdk::Work {
 public:
  // `task` was posted by `rank` of `group`.
  InMemoryWork(std::shared_ptr<Task> task, std::shared_ptr<Group> group, int32_t rank)
      : task_(std::move(task)), group_(std::move(group)), rank_(rank) {}

  // Waits until the operation finished and throws its error. timeout_ms < 0
  // waits as long as the operation's own timeout allows; timeout_ms >= 0
  // throws Error(TIMEOUT) if it is still running then (it keeps running).
  void wait(int64_t timeout_ms) override;
  // True when finished (throws its error); false while running.
  bool test() override;

 private:
  std::shared_ptr<Task> task_;
  std::shared_ptr<Group> group_;
  int32_t rank_;
};

// Waits for the posted receive `request` of `rank` until it completes or its
// own deadline passes, then withdraws it (TIMEOUT; breaks the group). Throws
// the receive's error.
void await_recv(Group& group, int32_t rank, RecvRequest& request);

// If the posted receive `request` is past its deadline and still unmatched,
// withdraws it and fails it with TIMEOUT (breaking the group).
void expire_recv(Group& group, int32_t rank, RecvRequest& request);

}  // namespace tessera::inmemory

// One rank's handle on an in-memory group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms.hpp"
#include "executor.hpp"
#include "group.hpp"
#include "tessera/sdk/backend.hpp"

namespace tessera::inmemory {

// Rank `rank()` of a group: validates and orders its operations and runs
// them through the group protocol (collectives) or the mailboxes (send/recv).
// Calls on one communicator come from one thread at a time; abort() from any.
class InMemoryComm final : public sdk::Comm {
 public:
  // Rank `rank` of `group`.
  InMemoryComm(std::shared_ptr<Group> group, int32_t rank);
  // Stops the worker thread. With operations still pending it first breaks
  // the group (peers would otherwise wait for this rank until they time
  // out; groups split from it are not affected); posted receives of this
  // rank fail with PEER_LOST.
  ~InMemoryComm() override;

  [[nodiscard]] int32_t rank() const override { return rank_; }
  [[nodiscard]] int32_t size() const override { return group_->size(); }

  // Collective over this group (in posting order): ranks with the same
  // colour >= 0 form a new group ordered by (key, rank here); nullptr for a
  // negative colour. Throws TIMEOUT / PEER_LOST / MISMATCH like collectives.
  std::unique_ptr<sdk::Comm> split(int32_t color, int32_t key) override;
  // Breaks this group and the groups split from it, on every rank.
  void abort(const char* reason) noexcept override;
  // Re-forms the group of the members that call within the grace (see
  // Group::shrink); runs on the calling thread, outside the posting order,
  // and leaves this communicator as it is.
  std::unique_ptr<sdk::Comm> shrink(int64_t grace_ms) override;
  // Validates `args` (throws INVALID_ARGUMENT) and runs or queues it; see
  // executor.hpp for ordering and mailbox.hpp for send/recv semantics.
  std::unique_ptr<sdk::Work> post(const tessera_coll_args& args, bool nonblocking) override;

 private:
  // Runs a task on the executing thread (see Executor::Runner).
  bool run_task(Task& task);
  void run_collective(const tessera_coll_args& args);
  void run_split(Task& task);
  void run_send(const tessera_coll_args& args);
  // Posts a receive whose completion is `done`.
  std::shared_ptr<RecvRequest> start_recv(const tessera_coll_args& args,
                                          std::shared_ptr<Completion> done);
  // The call to publish for `args`, staging the send buffer when it
  // overlaps the recv buffer in a way the data movement cannot handle.
  Call make_call(const tessera_coll_args& args);
  const std::byte* stage(const tessera_buffer& send, int32_t coll);
  [[nodiscard]] std::string op_label(int32_t coll, uint64_t seq) const;

  std::shared_ptr<Group> group_;
  int32_t rank_;
  uint64_t seq_ = 0;  // collectives (and splits) started on this group
  ShareScratch scratch_;
  std::vector<std::byte> staging_;  // tracked as TESSERA_MEM_COMM
  Executor executor_;
};

}  // namespace tessera::inmemory

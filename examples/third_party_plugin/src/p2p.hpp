// Point-to-point operations of the example_threads backend. They do not go
// through the communicator's worker: a send copies its data into the group at
// once (sends are buffered, so they never wait for the receiver) and a
// receive is posted at once, so receives match sends in the order each side
// posted them, whatever collectives are still queued.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <tessera/sdk/backend.hpp>

#include "collectives.hpp"
#include "group.hpp"

namespace example_threads {

// Copies `args.send` into the group for `args.peer`. Throws PEER_LOST once
// the group is aborted.
void run_send(const RankContext& ctx, const tessera_coll_args& args);

// A posted receive as the SDK's Work. It fails with TIMEOUT when nothing
// arrives within the operation's own timeout, and with PEER_LOST on abort.
class RecvWork final : public tessera::sdk::Work {
 public:
  // Posts the receive of `args` (already validated); `what` names it.
  RecvWork(const RankContext& ctx, const tessera_coll_args& args, std::string what);
  RecvWork(const RecvWork&) = delete;
  RecvWork& operator=(const RecvWork&) = delete;
  // Withdraws the receive if it is still posted, so no late message is
  // copied into a buffer its owner may have released.
  ~RecvWork() override;

  // timeout_ms >= 0 only limits this wait: TIMEOUT then leaves the receive
  // posted. timeout_ms < 0 waits up to the operation's own timeout.
  void wait(int64_t timeout_ms) override;
  bool test() override;

 private:
  void rethrow() const;

  std::shared_ptr<Group> group_;
  std::shared_ptr<RecvOp> op_;
  Deadline deadline_;  // the operation's own
};

}  // namespace example_threads

// Waiting for a started operation: the polling loop with its deadline, and
// what happens when the operation fails, the group fails, or time runs out.
#pragma once

#include <memory>

#include "backoff.hpp"
#include "op.hpp"

namespace tessera::mpi {

class Group;

// How drive() returned.
enum class WaitEnd {
  kDone,         // the operation completed
  kUserDeadline  // `user_deadline` passed first; the operation is untouched
};

// Polls `*slot` (MPI_Test, paced by a Backoff from `start`) until it
// completes or `user_deadline` passes. Throws, after moving the operation to
// the engine's abandoned list when MPI requests are still pending (leaving
// `slot` empty), when:
//   - the operation's own deadline passes: Error(TIMEOUT or PEER_LOST) with
//     the stall report (stall.hpp); the group is failed and its other
//     members are told;
//   - it has run for a second and a peer it waits on that ran on this host
//     has exited (checked every half second): Error(PEER_LOST) with the
//     stall report, without waiting for the deadline;
//   - the group fails (abort, or another rank's failure notice):
//     Error(PEER_LOST) carrying the group's failure reason;
//   - MPI reports an error: MISMATCH for a truncated or mis-sized message
//     (the group stays usable), otherwise PEER_LOST, failing the group.
WaitEnd drive(const std::shared_ptr<Group>& group, std::unique_ptr<OpState>& slot,
              Clock::time_point start, Deadline user_deadline);

// One look at `*slot` without waiting: true when it completed, false while
// it runs. Fails like drive() (its own deadline included).
bool poll_once(const std::shared_ptr<Group>& group, std::unique_ptr<OpState>& slot);

// Fails `group` with `status`/`reason` unless it failed already and tells
// the other members (a `tree` failure, i.e. an abort, also fails the groups
// split from it on every rank). Never throws.
void fail_group(const std::shared_ptr<Group>& group, tessera_status status,
                const std::string& reason, bool tree) noexcept;

}  // namespace tessera::mpi

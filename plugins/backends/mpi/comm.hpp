// One rank's handle on an mpi group.
#pragma once

#include <cstdint>
#include <memory>

#include "op.hpp"
#include "tessera/sdk/backend.hpp"

namespace tessera::mpi {

class Group;

// Rank `rank()` of a group: validates operations and runs them on the
// group's MPI communicator with MPI's non-blocking calls. Calls come from
// one thread at a time; abort() from any.
class MpiComm final : public sdk::Comm {
 public:
  explicit MpiComm(std::shared_ptr<Group> group);
  // Stops the control service answering for the group. Operations still
  // pending in MPI are left to it (MPI cannot cancel collectives); the MPI
  // communicators are freed once no work refers to the group any more.
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  [[nodiscard]] int32_t rank() const override;
  [[nodiscard]] int32_t size() const override;

  // Collective: first an allgather of (color, key) with the group's timeout
  // (so a missing rank gives a stall report, not a hang), then
  // MPI_Comm_split. Returns nullptr for color < 0. Fails like a collective.
  std::unique_ptr<sdk::Comm> split(int32_t color, int32_t key) override;
  // Fails this group (and the groups split from it) on this rank and tells
  // every other member, whose pending and later operations then fail with
  // PEER_LOST and `reason`.
  void abort(const char* reason) noexcept override;
  // Validates `args` with sdk::validate_coll_args (INVALID_ARGUMENT), then
  // starts the MPI call(s); a blocking post waits here (see progress.hpp for
  // timeouts and failures), a non-blocking one returns an MpiWork. A group
  // that failed before fails the operation at once with PEER_LOST and the
  // first failure's reason.
  std::unique_ptr<sdk::Work> post(const tessera_coll_args& args, bool nonblocking) override;
  // The blocking MPI call for `args` on the same communicator and datatypes
  // (MPI_Allreduce, MPI_Bcast, ...), without checks, timeout or progress
  // counting. Throws the MPI error; UNSUPPORTED for counts above INT_MAX.
  void raw(const tessera_coll_args& args) override;

 private:
  // An OpState for a blocking operation: the reused one when available.
  std::unique_ptr<OpState> take_scratch();

  std::shared_ptr<Group> group_;
  std::unique_ptr<OpState> scratch_;
  std::vector<std::byte> raw_staging_;
};

// Runs `args` to completion with the blocking MPI call (see MpiComm::raw).
void run_raw(const Group& group, const tessera_coll_args& args, std::vector<std::byte>& staging);

}  // namespace tessera::mpi

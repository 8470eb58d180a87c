// Handle on a posted non-blocking operation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "op.hpp"
#include "tessera/sdk/backend.hpp"

namespace tessera::mpi {

class Group;

// What post() returns for a non-blocking operation. Owns the operation's
// MPI requests and shares the group, so it stays valid after its
// communicator is destroyed.
class MpiWork final : public sdk::Work {
 public:
  MpiWork(std::shared_ptr<Group> group, std::unique_ptr<OpState> op);
  // A work dropped while MPI still runs its requests hands them to the
  // engine (MPI cannot cancel collectives).
  ~MpiWork() override;
  MpiWork(const MpiWork&) = delete;
  MpiWork& operator=(const MpiWork&) = delete;

  // Waits until the operation finished and throws its error. timeout_ms < 0
  // waits as long as the operation's own timeout allows (then the stall
  // report, see progress.hpp); timeout_ms >= 0 throws Error(TIMEOUT) when it
  // is still running then and leaves it running.
  void wait(int64_t timeout_ms) override;
  // True when finished (throws its error); false while running.
  bool test() override;

 private:
  // Remembers the error of a failed operation so later calls repeat it.
  void remember(const Error& e);
  [[noreturn]] void rethrow() const;

  std::shared_ptr<Group> group_;
  std::unique_ptr<OpState> op_;  // empty once failed with requests pending
  bool done_ = false;
  tessera_status status_ = TESSERA_OK;
  std::string error_;
};

}  // namespace tessera::mpi

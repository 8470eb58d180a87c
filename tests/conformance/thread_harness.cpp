#include "thread_harness.hpp"

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/rank_threads.hpp"

namespace tessera::conformance {
namespace {

// The world communicators of the running ranks, so that a failing rank can
// abort all of them. A communicator is attached while its rank runs the case
// and detached before it is destroyed.
class AbortBoard {
 public:
  explicit AbortBoard(int world_size) : comms_(static_cast<size_t>(world_size), nullptr) {}

  void attach(int rank, Communicator* comm) {
    const std::lock_guard lock(mu_);
    comms_[static_cast<size_t>(rank)] = comm;
    if (reason_) comm->abort(*reason_);
  }

  void detach(int rank) {
    const std::lock_guard lock(mu_);
    comms_[static_cast<size_t>(rank)] = nullptr;
  }

  void abort_all(const std::string& reason) {
    const std::lock_guard lock(mu_);
    if (!reason_) reason_ = reason;
    for (Communicator* comm : comms_) {
      if (comm != nullptr) comm->abort(*reason_);
    }
  }

 private:
  std::mutex mu_;
  std::vector<Communicator*> comms_;
  std::optional<std::string> reason_;
};

// Detaches a rank's communicator from the board when the rank's body ends,
// normally or by an exception, before the communicator is destroyed.
class Attachment {
 public:
  Attachment(AbortBoard& board, int rank, Communicator* comm) : board_(board), rank_(rank) {
    board_.attach(rank_, comm);
  }
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  ~Attachment() { board_.detach(rank_); }

 private:
  AbortBoard& board_;
  int rank_;
};

}  // namespace

void run_case_on_threads(Backend& backend, int world_size, CaseFn fn, const CaseParams& params) {
  AbortBoard board(world_size);
  run_rank_threads(
      world_size,
      [&](int rank) {
        std::unique_ptr<Communicator> comm = backend.connect(rank);
        const Attachment attachment(board, rank, comm.get());
        fn(*comm, params);
      },
      [&](int rank, const std::string& message) {
        board.abort_all("rank " + std::to_string(rank) + " failed: " + message);
      });
}

}  // namespace tessera::conformance

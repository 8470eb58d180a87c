// A rank killed with SIGKILL in the middle of a run must make every other
// rank fail within its timeout, with an error that names the dead rank and
// the collective, instead of hanging. Run under `mpirun --enable-recovery`
// (so that mpirun does not kill the survivors itself) with three or more
// ranks: the last rank kills itself after 20 allreduces; each survivor
// prints "survivor R ok: <error>" when its error is right, or
// "survivor R FAILED: ..." otherwise, and exits with status 3 (the backend
// leaves MPI unfinalized after losing a peer).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "mpi_session.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/sdk/error.hpp"

namespace {

constexpr int kRounds = 20;
constexpr auto kTimeout = std::chrono::milliseconds(2000);

int survive(tessera::Communicator& comm) {
  const int victim = comm.size() - 1;
  std::vector<float> data(4096, 1.0f);
  const std::string dead = "rank " + std::to_string(victim) + " is lost";
  for (int round = 0; round < 100 * kRounds; ++round) {
    if (comm.rank() == victim && round == kRounds) ::raise(SIGKILL);
    try {
      comm.allreduce(std::span<float>(data));
    } catch (const tessera::Error& e) {
      const std::string text = e.what();
      const bool right = e.status() == TESSERA_ERR_PEER_LOST &&
                         text.find(dead) != std::string::npos &&
                         text.find("allreduce") != std::string::npos;
      std::printf("survivor %d %s: %s\n", comm.rank(), right ? "ok" : "FAILED", text.c_str());
      std::fflush(stdout);
      return 3;
    }
  }
  std::printf("survivor %d FAILED: no error after rank %d was killed\n", comm.rank(), victim);
  return 1;
}

}  // namespace

int main() {
  tessera::init_logging("error");
  try {
    auto backend = tessera::mpitest::open_mpi({"stall_query_ms=1000"}, kTimeout);
    auto comm = backend->connect(-1);
    if (comm->size() < 3) {
      std::printf("survivor %d FAILED: needs three ranks, got %d\n", comm->rank(), comm->size());
      return 1;
    }
    return survive(*comm);
  } catch (const std::exception& e) {
    std::printf("lost peer check FAILED: %s\n", e.what());
    return 1;
  }
}

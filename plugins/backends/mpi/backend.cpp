#include "backend.hpp"

#include <array>
#include <chrono>
#include <cstring>
#include <vector>

#include "comm.hpp"
#include "control.hpp"
#include "group.hpp"
#include "runtime.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::mpi {
namespace {

// A rank's identity as exchanged at connect.
struct WireIdentity {
  std::array<char, 128> host{};
  int64_t pid = 0;
};

// How long the control service may take to send queued failure notices
// when the backend goes away.
constexpr std::chrono::milliseconds kFlush{1000};

}  // namespace

MpiBackend::MpiBackend(const sdk::Host& host, const sdk::Options& options,
                       const tessera_backend_config& config)
    : sdk::Backend(host) {
  const Settings settings = Settings::from(options, config);
  const ProcessInfo process = acquire_runtime(host, settings);
  try {
    engine_ = std::make_shared<Engine>(host, settings, process);
  } catch (...) {
    release_runtime(host, settings);
    throw;
  }
  host.log(TESSERA_LOG_DEBUG, process.rank, "mpi: rank ", process.rank, " of ", process.size, " (",
           engine_->self().host, ", pid ", engine_->self().pid, "), timeout ", settings.timeout_ms,
           " ms, service poll ", settings.service_poll.count(), " ms");
}

MpiBackend::~MpiBackend() {
  const sdk::Host host = engine_->host();
  const Settings settings = engine_->settings();
  engine_->control().stop(kFlush);
  release_runtime(host, settings);
  engine_.reset();
}

std::unique_ptr<sdk::Comm> MpiBackend::connect(int32_t rank) {
  const ProcessInfo& me = engine_->process();
  TESSERA_CHECK(rank == -1 || rank == me.rank, TESSERA_ERR_INVALID_ARGUMENT, "mpi connect: rank ",
                rank, " was asked for, but mpirun made this process rank ", me.rank, " of ",
                me.size, " (pass -1: the ranks come from MPI)");
  const Settings& s = engine_->settings();
  const Deadline deadline = deadline_after(Clock::now(), s.timeout_ms);
  const std::string what = detail::concat("mpi connect of rank ", me.rank, " of ", me.size);
  const auto timed_out = [&](const char* step) {
    return Error(TESSERA_ERR_TIMEOUT,
                 detail::concat(what, " timed out after ", s.timeout_ms, " ms ", step,
                                ": not every rank started by mpirun connected"));
  };

  MPI_Comm data = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Comm_idup(MPI_COMM_WORLD, &data, &request),
            what + ": MPI_Comm_idup(MPI_COMM_WORLD)", TESSERA_ERR_PEER_LOST);
  if (!wait_requests(&request, 1, s, deadline, what)) {
    throw timed_out("duplicating MPI_COMM_WORLD");
  }
  return_errors(data, what);

  // Host names and pids, so a rank that stops answering can be told apart
  // from one whose process is gone. The buffers are leaked if the exchange
  // times out, as MPI may still write them.
  auto mine = std::make_unique<WireIdentity>();
  std::strncpy(mine->host.data(), engine_->self().host.c_str(), mine->host.size() - 1);
  mine->pid = engine_->self().pid;
  auto all = std::make_unique<std::vector<WireIdentity>>(static_cast<size_t>(me.size));
  check_mpi(MPI_Iallgather(mine.get(), sizeof(WireIdentity), MPI_BYTE, all->data(),
                           sizeof(WireIdentity), MPI_BYTE, data, &request),
            what + ": MPI_Iallgather", TESSERA_ERR_PEER_LOST);
  if (!wait_requests(&request, 1, s, deadline, what)) {
    static_cast<void>(mine.release());
    static_cast<void>(all.release());
    throw timed_out("exchanging host names");
  }
  std::vector<Identity> members;
  members.reserve(all->size());
  for (const WireIdentity& w : *all) {
    members.push_back(
        Identity{std::string(w.host.data(), strnlen(w.host.data(), w.host.size())), w.pid});
  }
  auto group = open_group(engine_, data, "world", me.rank, std::move(members), deadline);
  engine_->host().log(TESSERA_LOG_DEBUG, me.rank, "mpi: ", what, " connected");
  return std::make_unique<MpiComm>(std::move(group));
}

}  // namespace tessera::mpi

#include "backend.hpp"

#include <cstring>
#include <thread>
#include <vector>

#include "bootstrap.hpp"
#include "comm.hpp"
#include "cuda.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::nccl_backend {

NcclBackend::NcclBackend(const sdk::Host& host, const sdk::Options& options,
                         const tessera_backend_config& config)
    : sdk::Backend(host), settings_(Settings::from(options, config, process_environment())) {
  const int32_t devices = require_cuda_devices();
  TESSERA_CHECK(settings_.local_rank < devices, TESSERA_ERR_INVALID_ARGUMENT,
                "nccl: LOCAL_RANK=", settings_.local_rank, " but this machine has ", devices,
                " CUDA device", devices == 1 ? "" : "s",
                " (start at most one rank per GPU on each machine)");
  host.debug("nccl: rank ", settings_.rank, " of ", settings_.world_size, " on CUDA device ",
             settings_.local_rank, " of ", devices, ", ", settings_.store.description(),
             ", run id '", settings_.store.run_id, "', timeout ", settings_.timeout_ms, " ms",
             settings_.stage_host ? ", host buffers staged" : "");
  // Rank 0 serves the TCP store, or every process holds the run in a store
  // no rank serves.
  const sdk::StoreUse use = settings_.store.process_use(settings_.rank, false);
  if (use != sdk::StoreUse::kClient) {
    store_service_ = std::make_shared<sdk::Store>(host, settings_.store, "nccl", use);
  }
}

std::unique_ptr<sdk::Comm> NcclBackend::connect(int32_t rank) {
  const Settings& s = settings_;
  TESSERA_CHECK(rank == -1 || rank == s.rank, TESSERA_ERR_INVALID_ARGUMENT, "nccl connect: rank ",
                rank, " differs from RANK=", s.rank,
                " of this process (nccl runs one rank per process; connect with -1)");
  cuda_check(cudaSetDevice(s.local_rank), "cudaSetDevice",
             detail::concat("rank ", s.rank, ", LOCAL_RANK=", s.local_rank));
  auto engine = std::make_shared<Engine>(host(), s);
  engine->store_service = store_service_;
  engine->prefix = s.store.run_id + "/nccl/c" + std::to_string(connects_++);

  const auto store = std::make_unique<sdk::Store>(host(), s.store, "nccl");
  const std::vector<char> id_bytes = share_unique_id(
      *store, engine->prefix + "/w", "world", s.rank, 0, sizeof(ncclUniqueId),
      [] {
        ncclUniqueId id{};
        const ncclResult_t r = ncclGetUniqueId(&id);
        TESSERA_CHECK(r == ncclSuccess, TESSERA_ERR_INTERNAL,
                      "nccl: ncclGetUniqueId failed on rank 0: ", nccl_error_text(r, nullptr));
        std::vector<char> bytes(sizeof(id));
        std::memcpy(bytes.data(), &id, sizeof(id));
        return bytes;
      },
      s.timeout_ms);
  ncclUniqueId id{};
  std::memcpy(&id, id_bytes.data(), sizeof(id));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, s.world_size, id, s.rank, &config);
  if (r == ncclSuccess && comm != nullptr) (void)ncclCommGetAsyncError(comm, &r);
  const auto start = Clock::now();
  while (r == ncclInProgress && comm != nullptr) {
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    if (s.timeout_ms >= 0 && waited >= s.timeout_ms) {
      (void)ncclCommAbort(comm);
      throw Error(
          TESSERA_ERR_TIMEOUT,
          detail::concat("nccl: connecting group 'world' (rank ", s.rank, " of ", s.world_size,
                         ") through the ", store->description(), " timed out after ", waited,
                         " ms while the NCCL communicator was forming (start all ", s.world_size,
                         " ranks with `tessera launch -n ", s.world_size, " -- ...`)"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    (void)ncclCommGetAsyncError(comm, &r);
  }
  if (r != ncclSuccess) {
    const std::string text = nccl_error_text(r, comm);
    if (comm != nullptr) (void)ncclCommAbort(comm);
    throw Error(TESSERA_ERR_PEER_LOST,
                detail::concat("nccl: connecting group 'world' (rank ", s.rank, " of ",
                               s.world_size, ") failed: ", text));
  }
  engine->board = std::make_shared<ProgressBoard>([host = host(), config = s.store] {
    return std::make_unique<sdk::Store>(host, config, "nccl");
  });
  auto group =
      std::make_shared<Group>("world", s.local_rank, comm, engine->prefix + "/w", engine->board);
  host().log(TESSERA_LOG_DEBUG, s.rank, "nccl: world of ", s.world_size, " ranks connected");
  return std::make_unique<NcclComm>(std::move(engine), std::move(group));
}

}  // namespace tessera::nccl_backend

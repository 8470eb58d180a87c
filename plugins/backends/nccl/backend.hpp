// The nccl backend: one process is one rank on one GPU (LOCAL_RANK picks
// it); rank 0 makes the ncclUniqueId and hands it to the others through the
// TCP, file or Redis store the process backends share.
#pragma once

#include <cstdint>
#include <memory>

#include "settings.hpp"
#include "tessera/sdk/backend.hpp"

namespace tessera::nccl_backend {

class NcclBackend final : public sdk::Backend {
 public:
  // Resolves the options, the config and the environment (Settings::from),
  // then checks that this process sees a CUDA device for its LOCAL_RANK:
  // throws Error(UNSUPPORTED) "nccl: no CUDA device
  // (cudaGetDeviceCount: ...)" when there is none. Connects nothing yet.
  NcclBackend(const sdk::Host& host, const sdk::Options& options,
              const tessera_backend_config& config);

  // Joins the world as this process's rank (`rank` must be -1 or equal
  // RANK): rank 0 writes the unique id to the store, the others wait for it
  // (at most the timeout), then every rank initialises a non-blocking
  // communicator on its device and waits for it to be ready.
  std::unique_ptr<sdk::Comm> connect(int32_t rank) override;

 private:
  Settings settings_;
  // The TCP store this process serves as rank 0, or its hold on the run in
  // a store no rank serves (null when neither), shared with every world's
  // engine so it lives until the last communicator goes.
  std::shared_ptr<sdk::Store> store_service_;
  uint64_t connects_ = 0;
};

}  // namespace tessera::nccl_backend

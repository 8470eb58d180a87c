// A tensor-parallel group of ranks as threads for the checks of the CUDA
// units under a group, where the emulation has no backend plugin: a
// backend table whose blocking `post` runs the collectives the units call
// (allreduce of sum or max, allgather, reduce-scatter, all f32) over host
// memory. It refuses, saying why on stderr, what a real backend would fail
// on with the same buffers on a device: device-only memory or a buffer
// handed as a CUDA one, which a CPU backend cannot read on the host, and
// with `cuda_buffers` (a backend that takes CUDA buffers, as nccl) a
// buffer handed as a CPU one.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/c/backend.h"
#include "tessera/c/model.h"

namespace tessera::emu {

class ThreadGroup {
 public:
  ThreadGroup(int32_t size, bool cuda_buffers);
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;
  ~ThreadGroup();

  // Runs body(rank, group) on every rank, one thread each, the group's
  // flags `flags` (TESSERA_TP_*). A collective some rank does not reach
  // within 20 s fails (TESSERA_ERR_TIMEOUT) rather than hang. Rethrows the
  // first rank's failure.
  void run(const std::function<void(int32_t rank, const tessera_tp_group& group)>& body,
           uint32_t flags);

  // How many collectives rank 0 posted since the group was made, and how
  // many of them with a buffer in device-only memory (taken where it is,
  // as nccl does).
  [[nodiscard]] int64_t collectives() const noexcept { return collectives_; }
  [[nodiscard]] int64_t device_collectives() const noexcept { return device_collectives_; }
  // How many of them were allgathers and reduce-scatters, and how many of
  // those had a buffer in device-only memory.
  [[nodiscard]] int64_t exchanges() const noexcept { return exchanges_; }
  [[nodiscard]] int64_t device_exchanges() const noexcept { return device_exchanges_; }

  // A rank's communicator handle (tessera_comm).
  struct Rank;

 private:
  static tessera_status post(tessera_comm* comm, const tessera_coll_args* args,
                             tessera_work** work);
  tessera_status collective(int32_t rank, const tessera_coll_args& args);
  // Every rank arrives before any goes on; false after 20 s.
  bool meet();

  int32_t size_;
  tessera_backend_api api_{};
  std::vector<Rank*> ranks_;
  std::vector<const tessera_coll_args*> posted_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  int32_t waiting_ = 0;
  uint64_t generation_ = 0;
  int64_t collectives_ = 0;
  int64_t device_collectives_ = 0;
  int64_t exchanges_ = 0;
  int64_t device_exchanges_ = 0;
};

}  // namespace tessera::emu

// One rank's handle on an NCCL group: checks the arguments, turns each
// operation of the backend table into NCCL calls on the group's stream and
// hands back work that completes on a CUDA event.
#pragma once

#include <cstdint>
#include <memory>

#include "group.hpp"
#include "settings.hpp"
#include "tessera/sdk/backend.hpp"

namespace tessera::nccl_backend {

// What every communicator of one connect shares; the TCP store rank 0
// serves (if any) goes last.
struct Engine {
  Engine(const sdk::Host& h, const Settings& s)
      : host(h), settings(s), watchdog(s.local_rank, std::chrono::milliseconds(s.watchdog_ms)) {}
  std::shared_ptr<sdk::Store> store_service;  // rank 0's TCP store, the hold on the run, or null
  sdk::Host host;
  Settings settings;
  std::string prefix;  // store namespace of this world: "<run_id>/c<connect number>"
  std::shared_ptr<ProgressBoard> board;  // what waiting ranks tell each other
  Watchdog watchdog;
};

class NcclComm final : public sdk::Comm {
 public:
  NcclComm(std::shared_ptr<Engine> engine, std::shared_ptr<Group> group);
  [[nodiscard]] int32_t rank() const override { return group_->rank(); }
  [[nodiscard]] int32_t size() const override { return group_->size(); }
  // ncclCommSplit of this group's communicator (non-blocking, bounded by the
  // timeout); the new group gets its own stream.
  std::unique_ptr<sdk::Comm> split(int32_t color, int32_t key) override;
  void abort(const char* reason) noexcept override;
  std::unique_ptr<sdk::Work> post(const tessera_coll_args& args, bool nonblocking) override;
  // The bare NCCL call on device buffers, then cudaStreamSynchronize.
  void raw(const tessera_coll_args& args) override;

 private:
  // Starts `a` (device buffers) on the group's stream; the event completes
  // with it (see Group::start).
  std::shared_ptr<Event> start(const tessera_coll_args& a, const std::string& label,
                               Clock::time_point deadline);
  // Runs `a` on host buffers through the group's device staging buffers,
  // to completion.
  void post_staged(const tessera_coll_args& a, const std::string& label, int64_t timeout_ms);
  std::string label_of(const tessera_coll_args& a);

  std::shared_ptr<Engine> engine_;
  std::shared_ptr<Group> group_;
};

}  // namespace tessera::nccl_backend

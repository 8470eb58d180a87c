#include "backend.hpp"

#include <numeric>

#include "comm.hpp"
#include "signal.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::inmemory {

InMemoryBackend::InMemoryBackend(const sdk::Host& host, const sdk::Options& options,
                                 const tessera_backend_config& config)
    : sdk::Backend(host),
      engine_(std::make_shared<const Engine>(Engine{host, Settings::from(options, config)})),
      joined_(static_cast<size_t>(engine_->settings.world_size), false) {
  host.debug("inmemory: backend for ", engine_->settings.world_size, " ranks, block ",
             engine_->settings.block_bytes >> 10, " KiB, spin ",
             engine_->settings.spin.count() / 1000, " us, timeout ", engine_->settings.timeout_ms,
             " ms");
}

std::unique_ptr<sdk::Comm> InMemoryBackend::connect(int32_t rank) {
  const int32_t size = engine_->settings.world_size;
  TESSERA_CHECK(rank >= 0 && rank < size, TESSERA_ERR_INVALID_ARGUMENT, "inmemory connect: rank ",
                rank, " is out of range [0, ", size,
                ") (ranks are threads; each passes its own rank)");
  std::unique_lock<std::mutex> lock(mu_);
  if (!failure_.empty()) {
    throw Error(TESSERA_ERR_PEER_LOST,
                detail::concat("inmemory connect of rank ", rank, " failed: ", failure_));
  }
  TESSERA_CHECK(!joined_[rank], TESSERA_ERR_INVALID_ARGUMENT, "inmemory connect: rank ", rank,
                " has already joined the world being formed");
  joined_[rank] = true;
  ++joined_count_;
  host().log(TESSERA_LOG_DEBUG, rank, "inmemory: rank ", rank, " joined (", joined_count_, " of ",
             size, ")");
  if (joined_count_ == size) {
    std::vector<int32_t> world(static_cast<size_t>(size));
    std::iota(world.begin(), world.end(), 0);
    formed_ = std::make_shared<Group>(engine_, std::move(world));
    ++generation_;
    joined_.assign(joined_.size(), false);
    joined_count_ = 0;
    cv_.notify_all();
    host().log(TESSERA_LOG_DEBUG, rank, "inmemory: world of ", size, " ranks formed");
    return std::make_unique<InMemoryComm>(formed_, rank);
  }
  const uint64_t generation = generation_;
  const int64_t timeout = engine_->settings.timeout_ms;
  const auto ready = [&] { return generation_ != generation || !failure_.empty(); };
  const Deadline deadline = deadline_after(timeout);
  if (has_deadline(deadline)) {
    cv_.wait_until(lock, deadline, ready);
  } else {
    cv_.wait(lock, ready);
  }
  if (generation_ == generation + 1) return std::make_unique<InMemoryComm>(formed_, rank);
  if (generation_ != generation) {
    throw Error(TESSERA_ERR_INTERNAL,
                detail::concat("inmemory connect of rank ", rank,
                               ": another world formed before this rank took its place"));
  }
  if (!failure_.empty()) {
    throw Error(TESSERA_ERR_PEER_LOST,
                detail::concat("inmemory connect of rank ", rank, " failed: ", failure_));
  }
  std::string missing;
  int32_t n_missing = 0;
  for (int32_t r = 0; r < size; ++r) {
    if (joined_[r]) continue;
    missing += detail::concat(n_missing == 0 ? "" : ", ", r);
    ++n_missing;
  }
  failure_ =
      detail::concat("connect timed out after ", timeout, " ms waiting for a world of ", size,
                     " ranks: ", n_missing == 1 ? "rank " : "ranks ", missing, " never joined");
  cv_.notify_all();
  host().log(TESSERA_LOG_WARN, rank, "inmemory: ", failure_);
  throw Error(TESSERA_ERR_TIMEOUT, detail::concat("inmemory ", failure_));
}

}  // namespace tessera::inmemory

#include "fault.hpp"

#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera::inmemory {

bool Fault::set(tessera_status status, std::string reason) {
  const std::lock_guard<std::mutex> lock(mu_);
  if (set_.load(std::memory_order_relaxed)) return false;
  status_ = status;
  reason_ = std::move(reason);
  set_.store(true, std::memory_order_release);
  return true;
}

void Fault::throw_lost(std::string_view what) const {
  throw Error(TESSERA_ERR_PEER_LOST,
              detail::concat(what, " failed: the group is broken: ", reason_));
}

}  // namespace tessera::inmemory

#include "watchdog.hpp"

namespace tessera::gloo_backend {

Watchdog::~Watchdog() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::add(const std::shared_ptr<Group>& group) {
  const std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(groups_, [](const std::weak_ptr<Group>& g) { return g.expired(); });
  groups_.push_back(group);
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [&] { return stopping_; })) {
    std::vector<std::shared_ptr<Group>> live;
    live.reserve(groups_.size());
    for (const auto& weak : groups_) {
      if (auto g = weak.lock()) live.push_back(std::move(g));
    }
    lock.unlock();
    const auto now = std::chrono::steady_clock::now();
    for (const auto& g : live) {
      g->expire_if_late(now);
      // gloo may wait again after an interrupted wait (group.hpp).
      if (g->sockets_broken()) g->waits().interrupt_all();
    }
    live.clear();  // a group may be destroyed here, outside the lock
    lock.lock();
  }
}

}  // namespace tessera::gloo_backend

// Deadlines of operations gloo does not time out itself.
//
// gloo's algorithm objects wait on their pairs with the timeout the pairs
// got when the group connected, and gloo::* functions only with the timeout
// handed to them. An operation registers its deadline with its group
// (Group::watch, two atomic stores); this thread looks at every group every
// few milliseconds and breaks the sockets of one whose operation is late,
// which makes the blocked gloo call return with an IoException. Once a
// group's sockets are broken, it also wakes the waits of the group's
// running operations every period (waits.hpp), until they are over.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "group.hpp"

namespace tessera::gloo_backend {

class Watchdog {
 public:
  // Checks the groups every `period`.
  explicit Watchdog(std::chrono::milliseconds period = std::chrono::milliseconds(10))
      : period_(period) {}
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  // Stops the thread.
  ~Watchdog();

  // Watches `group` while it lives; starts the thread on first use.
  void add(const std::shared_ptr<Group>& group);

 private:
  void loop();

  std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::weak_ptr<Group>> groups_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::gloo_backend

// What every group and communicator of one world (one `connect`) shares.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "control.hpp"
#include "device.hpp"
#include "settings.hpp"
#include "store.hpp"
#include "tessera/sdk/host.hpp"
#include "watchdog.hpp"

namespace tessera::gloo_backend {

// Members are destroyed in reverse order: the watchdog and the control
// service stop before the device goes, and the TCP store rank 0 serves (if
// any) last. Every connect opens its own store client (open_store), so
// groups may be formed from several threads.
struct Engine {
  std::shared_ptr<Store> store_service;  // rank 0's TCP store, the hold on the run, or null
  sdk::Host host;
  Settings settings;
  DeviceChoice device;
  std::string prefix;  // store namespace of this world: "<run_id>/c<connect number>"
  std::unique_ptr<Control> control;
  Watchdog watchdog;
  // Admitting joiners (GlooComm::grow): the first entry of the run's join
  // queue not yet decided, the worlds grown from this one so far, and the
  // store client the world's rank 0 looks into the queue with (opened on
  // first use, used by one thread at a time).
  int64_t next_join = 0;
  uint64_t grows = 0;
  std::unique_ptr<Store> join_store;

  Engine(const sdk::Host& h, Settings s) : host(h), settings(std::move(s)) {}
};

}  // namespace tessera::gloo_backend

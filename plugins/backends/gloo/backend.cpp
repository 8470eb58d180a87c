#include "backend.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "comm.hpp"
#include "engine.hpp"
#include "group.hpp"
#include "rendezvous.hpp"
#include "store.hpp"

namespace tessera::gloo_backend {
namespace {

// gloo writes to its sockets with writev(2), which raises SIGPIPE when the
// peer has closed the connection; the default action would kill this rank
// instead of letting the write fail and the operation report the lost peer.
// Ignores SIGPIPE unless the application installed a handler of its own.
// Returns true if it changed the disposition.
bool ignore_sigpipe() noexcept {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) != 0) return false;
  if (current.sa_handler != SIG_DFL) return false;  // NOLINT: the union member in use
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;  // NOLINT
  ::sigemptyset(&ignore.sa_mask);
  return ::sigaction(SIGPIPE, &ignore, nullptr) == 0;
}

}  // namespace

GlooBackend::GlooBackend(const sdk::Host& host, const sdk::Options& options,
                         const tessera_backend_config& config)
    : sdk::Backend(host), settings_(Settings::from(options, config, process_environment())) {
  host.debug("gloo: rank ", settings_.rank, " of ", settings_.world_size, ", ",
             settings_.store_description(), ", run id '", settings_.store.run_id, "', allreduce ",
             algorithm_name(settings_.algorithm), ", timeout ", settings_.timeout_ms, " ms");
  if (ignore_sigpipe())
    host.debug("gloo: SIGPIPE is ignored from now on (closed peers fail writes)");
  // Rank 0 serves the TCP store, or every process holds the run in a store
  // no rank serves (a joining process is nobody's rank 0).
  const sdk::StoreUse use = settings_.store.process_use(settings_.rank, settings_.joining);
  if (use != sdk::StoreUse::kClient) store_service_ = open_store(host, settings_, use);
}

std::unique_ptr<sdk::Comm> GlooBackend::connect(int32_t rank) {
  const Settings& s = settings_;
  WorldStart start;
  start.settings = s;
  start.device = make_device(s);
  start.store_service = store_service_;
  if (s.joining) {
    // A world of this process alone, under keys no other process uses; it
    // waits to be admitted into the running world in GlooComm::grow.
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    start.prefix =
        detail::concat(s.store.run_id, "/joining/", ::getpid(), "-", now, "-", connects_++);
    host().log(TESSERA_LOG_DEBUG, s.rank, "gloo: joining the running world of run '",
               s.store.run_id, "' through the ", s.store_description(), "; bound to ",
               start.device.description);
    return connect_world(host(), std::move(start));
  }
  TESSERA_CHECK(rank == -1 || rank == s.rank, TESSERA_ERR_INVALID_ARGUMENT, "gloo connect: rank ",
                rank, " differs from RANK=", s.rank,
                " of this process (gloo runs one rank per process; connect with -1)");
  start.prefix = s.store.run_id + "/c" + std::to_string(connects_++);
  host().log(TESSERA_LOG_DEBUG, s.rank, "gloo: rank ", s.rank, " binds to ",
             start.device.description, " and meets ", s.world_size - 1, " peers through the ",
             s.store_description(), " under '", start.prefix, "'");
  return connect_world(host(), std::move(start));
}

}  // namespace tessera::gloo_backend

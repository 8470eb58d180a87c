#include "backend.hpp"

#include <signal.h>

#include <numeric>
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
  store_service_ =
      backend_store::serve_store(settings_.store, settings_.rank, "gloo",
                                 [host, rank = settings_.rank](const std::string& text) {
                                   host.log(TESSERA_LOG_DEBUG, rank, text);
                                 });
}

std::unique_ptr<sdk::Comm> GlooBackend::connect(int32_t rank) {
  const Settings& s = settings_;
  TESSERA_CHECK(rank == -1 || rank == s.rank, TESSERA_ERR_INVALID_ARGUMENT, "gloo connect: rank ",
                rank, " differs from RANK=", s.rank,
                " of this process (gloo runs one rank per process; connect with -1)");
  auto engine = std::make_shared<Engine>(host(), s);
  engine->store_service = store_service_;
  engine->device = make_device(s);
  engine->prefix = s.store.run_id + "/c" + std::to_string(connects_++);
  host().log(TESSERA_LOG_DEBUG, s.rank, "gloo: rank ", s.rank, " binds to ",
             engine->device.description, " and meets ", s.world_size - 1, " peers through the ",
             s.store_description(), " under '", engine->prefix, "'");

  const auto store = open_store(s);
  const GroupAddress world{engine->prefix + "/w", "world", s.rank, s.world_size};
  await_members(*store, world, s.timeout_ms);
  Connection data = connect_group(*store, world, engine->device.device, s.timeout_ms);
  const GroupAddress control{engine->prefix + "/control", "control", s.rank, s.world_size};
  Connection channel = connect_group(*store, control, engine->device.device, s.timeout_ms);
  engine->control = std::make_unique<Control>(host(), std::move(channel));

  GroupIdentity identity;
  identity.id = "w";
  identity.key = group_key(identity.id);
  identity.name = "world";
  identity.rank = s.rank;
  identity.world_ranks.resize(static_cast<size_t>(s.world_size));
  std::iota(identity.world_ranks.begin(), identity.world_ranks.end(), 0);
  auto group = std::make_shared<Group>(std::move(identity), std::move(data));
  host().log(TESSERA_LOG_DEBUG, s.rank, "gloo: world of ", s.world_size, " ranks connected");
  return std::make_unique<GlooComm>(std::move(engine), std::move(group));
}

}  // namespace tessera::gloo_backend

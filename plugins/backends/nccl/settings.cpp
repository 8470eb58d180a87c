#include "settings.hpp"

#include "tessera/sdk/coll.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::nccl_backend {
namespace {

void check_one(const tessera_coll_args& a, int32_t rank, int32_t size, const tessera_buffer& b,
               const char* which, bool stage_host, int32_t device) {
  if (b.device.type == TESSERA_DEVICE_CPU) {
    if (stage_host) return;
    throw Error(
        TESSERA_ERR_INVALID_ARGUMENT,
        detail::concat("nccl: ", coll_name(a.coll), " on rank ", rank, " of ", size, ": ", which,
                       " is a host (cpu) buffer; the nccl backend works on CUDA device "
                       "buffers (set [backend.options] stage_host = true to copy host "
                       "buffers through device memory)"));
  }
  if (b.device.index != device) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("nccl: ", coll_name(a.coll), " on rank ", rank, " of ", size, ": ",
                               which, " is on CUDA device ", b.device.index,
                               " but this rank runs on CUDA device ", device, " (LOCAL_RANK)"));
  }
}

}  // namespace

Settings Settings::from(const sdk::Options& options, const tessera_backend_config& config,
                        const EnvLookup& env) {
  Settings s;
  const sdk::Ranks ranks = sdk::resolve_ranks(env, config, "nccl");
  s.rank = ranks.rank;
  s.world_size = ranks.world_size;
  if (const auto local = env("LOCAL_RANK")) {
    const auto parsed = sdk::parse_int(*local);
    TESSERA_CHECK(parsed && *parsed >= 0 && *parsed < 4096, TESSERA_ERR_INVALID_ARGUMENT,
                  "nccl: environment variable LOCAL_RANK='", *local,
                  "' is not a device number in 0..4095 (it picks this rank's CUDA device)");
    s.local_rank = static_cast<int32_t>(*parsed);
  }
  TESSERA_CHECK(config.timeout_ms != 0, TESSERA_ERR_INVALID_ARGUMENT,
                "nccl: timeout_ms must be > 0 (or < 0 for none), got 0");
  s.timeout_ms = config.timeout_ms;
  s.store = sdk::resolve_store_settings(options, env, "nccl");
  s.store.timeout_ms = s.timeout_ms;
  s.stage_host = options.get_bool("stage_host");
  s.watchdog_ms = options.get_int("watchdog_ms");
  TESSERA_CHECK(s.watchdog_ms >= 1 && s.watchdog_ms <= 10000, TESSERA_ERR_INVALID_ARGUMENT,
                "nccl option watchdog_ms must be in 1..10000, got ", s.watchdog_ms);
  return s;
}

void check_buffer_devices(const tessera_coll_args& args, int32_t rank, int32_t size,
                          bool stage_host, int32_t device) {
  const bool send = sdk::coll_uses_send(args.coll, rank, args.root);
  const bool recv = sdk::coll_uses_recv(args.coll, rank, args.root);
  if (send) check_one(args, rank, size, args.send, "send", stage_host, device);
  if (recv) check_one(args, rank, size, args.recv, "recv", stage_host, device);
}

}  // namespace tessera::nccl_backend

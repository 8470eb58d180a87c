#include "settings.hpp"

#include "tessera/sdk/error.hpp"

namespace tessera::gloo_backend {
namespace {

Algorithm parse_algorithm(const std::string& name) {
  for (const Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kRingChunked,
                            Algorithm::kHalvingDoubling, Algorithm::kBcube}) {
    if (name == algorithm_name(a)) return a;
  }
  throw Error(TESSERA_ERR_INVALID_ARGUMENT,
              detail::concat("gloo option algorithm = '", name,
                             "' is not one of auto, ring, ring_chunked, halving_doubling, bcube"));
}

}  // namespace

const char* algorithm_name(Algorithm a) noexcept {
  switch (a) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kRingChunked:
      return "ring_chunked";
    case Algorithm::kHalvingDoubling:
      return "halving_doubling";
    case Algorithm::kBcube:
      return "bcube";
  }
  return "?";
}

Settings Settings::from(const sdk::Options& options, const tessera_backend_config& config,
                        const EnvLookup& env) {
  Settings s;
  s.joining = config.joining != 0;
  if (!s.joining) {
    const sdk::Ranks ranks = sdk::resolve_ranks(env, config, "gloo");
    s.rank = ranks.rank;
    s.world_size = ranks.world_size;
  }
  TESSERA_CHECK(config.timeout_ms != 0, TESSERA_ERR_INVALID_ARGUMENT,
                "gloo: timeout_ms must be > 0 (or < 0 for none), got 0");
  s.timeout_ms = config.timeout_ms;

  s.store = sdk::resolve_store_settings(options, env, "gloo");
  s.store.timeout_ms = s.timeout_ms;
  s.interface = options.get_string("interface");
  s.hostname = options.get_string("hostname");
  s.master_addr = env("MASTER_ADDR").value_or("");
  if (const auto port = env("MASTER_PORT")) {
    const auto parsed = sdk::parse_int(*port);
    TESSERA_CHECK(parsed && *parsed >= 0 && *parsed <= 65535, TESSERA_ERR_INVALID_ARGUMENT,
                  "gloo: environment variable MASTER_PORT='", *port, "' is not a port number");
    s.master_port = static_cast<int32_t>(*parsed);
  }
  s.algorithm = parse_algorithm(options.get_string("algorithm"));
  const int64_t threshold_kb = options.get_int("auto_threshold_kb");
  TESSERA_CHECK(threshold_kb >= 0 && threshold_kb <= 1048576, TESSERA_ERR_INVALID_ARGUMENT,
                "gloo option auto_threshold_kb must be in 0..1048576, got ", threshold_kb);
  s.auto_threshold_bytes = static_cast<uint64_t>(threshold_kb) << 10;
  s.probe_ms = options.get_int("probe_ms");
  TESSERA_CHECK(s.probe_ms >= 50 && s.probe_ms <= 60000, TESSERA_ERR_INVALID_ARGUMENT,
                "gloo option probe_ms must be in 50..60000, got ", s.probe_ms);
  return s;
}

}  // namespace tessera::gloo_backend

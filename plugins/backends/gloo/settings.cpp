#include "settings.hpp"

#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "tessera/sdk/error.hpp"

namespace tessera::gloo_backend {
namespace {

constexpr std::string_view kStartHint =
    "start every rank with `tessera launch -n N -- <program>` (or torchrun), which sets RANK "
    "and WORLD_SIZE";

// Parses a whole decimal integer; std::nullopt for anything else.
std::optional<int64_t> parse_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0') return std::nullopt;
  return static_cast<int64_t>(v);
}

// The integer in environment variable `name`; throws naming it when it is
// unset or not an integer.
int64_t env_int(const EnvLookup& env, const char* name) {
  const auto value = env(name);
  if (!value) {
    throw Error(
        TESSERA_ERR_INVALID_ARGUMENT,
        detail::concat("gloo: environment variable ", name,
                       " is not set, so this process does not know its rank; ", kStartHint));
  }
  const auto parsed = parse_int(*value);
  if (!parsed) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("gloo: environment variable ", name, "='", *value,
                               "' is not an integer; ", kStartHint));
  }
  return *parsed;
}

// The option `key` if not empty, else environment variable `var` if set and
// not empty, else `fallback`.
std::string option_or_env(const sdk::Options& options, const char* key, const EnvLookup& env,
                          const char* var, const std::string& fallback) {
  std::string value = options.get_string(key);
  if (!value.empty()) return value;
  if (const auto from_env = env(var); from_env && !from_env->empty()) return *from_env;
  return fallback;
}

Algorithm parse_algorithm(const std::string& name) {
  for (const Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kRingChunked,
                            Algorithm::kHalvingDoubling, Algorithm::kBcube}) {
    if (name == algorithm_name(a)) return a;
  }
  throw Error(TESSERA_ERR_INVALID_ARGUMENT,
              detail::concat("gloo option algorithm = '", name,
                             "' is not one of auto, ring, ring_chunked, halving_doubling, bcube"));
}

void resolve_store(Settings& s, const sdk::Options& options, const EnvLookup& env) {
  const std::string store = options.get_string("store");
  if (store == "file") {
    s.store = StoreKind::kFile;
    s.store_dir = option_or_env(options, "store_dir", env, "TESSERA_RENDEZVOUS_DIR", "");
    TESSERA_CHECK(!s.store_dir.empty(), TESSERA_ERR_INVALID_ARGUMENT,
                  "gloo: the file store needs a directory shared by all ranks: set option "
                  "store_dir or environment variable TESSERA_RENDEZVOUS_DIR (`tessera launch` "
                  "sets it)");
  } else if (store == "redis") {
    s.store = StoreKind::kRedis;
    s.redis_host = option_or_env(options, "redis_host", env, "MASTER_ADDR", "127.0.0.1");
    const int64_t port = options.get_int("redis_port");
    TESSERA_CHECK(port >= 1 && port <= 65535, TESSERA_ERR_INVALID_ARGUMENT,
                  "gloo option redis_port must be in 1..65535, got ", port);
    s.redis_port = static_cast<int32_t>(port);
  } else {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("gloo option store = '", store, "' is not \"file\" or \"redis\""));
  }
  s.run_id = option_or_env(options, "run_id", env, "TESSERA_RUN_ID", "tessera");
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

EnvLookup process_environment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read once at creation
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

Settings Settings::from(const sdk::Options& options, const tessera_backend_config& config,
                        const EnvLookup& env) {
  Settings s;
  const int64_t size = env_int(env, "WORLD_SIZE");
  const int64_t rank = env_int(env, "RANK");
  TESSERA_CHECK(size >= 1 && size <= 65536, TESSERA_ERR_INVALID_ARGUMENT, "gloo: WORLD_SIZE=", size,
                " must be in 1..65536; ", kStartHint);
  TESSERA_CHECK(rank >= 0 && rank < size, TESSERA_ERR_INVALID_ARGUMENT, "gloo: RANK=", rank,
                " is outside [0, WORLD_SIZE=", size, "); ", kStartHint);
  s.world_size = static_cast<int32_t>(size);
  s.rank = static_cast<int32_t>(rank);
  if (config.world_size != -1) {
    TESSERA_CHECK(config.world_size == s.world_size, TESSERA_ERR_INVALID_ARGUMENT,
                  "gloo: the configured world_size = ", config.world_size,
                  " differs from WORLD_SIZE=", s.world_size,
                  " of the environment; set [run] world_size to -1 or to the number of "
                  "processes started");
  }
  TESSERA_CHECK(config.timeout_ms != 0, TESSERA_ERR_INVALID_ARGUMENT,
                "gloo: timeout_ms must be > 0 (or < 0 for none), got 0");
  s.timeout_ms = config.timeout_ms;

  resolve_store(s, options, env);
  s.interface = options.get_string("interface");
  s.hostname = options.get_string("hostname");
  s.master_addr = env("MASTER_ADDR").value_or("");
  if (const auto port = env("MASTER_PORT")) {
    const auto parsed = parse_int(*port);
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

std::string Settings::store_description() const {
  if (store == StoreKind::kFile) return "file store at '" + store_dir + "'";
  return "Redis store at " + redis_host + ":" + std::to_string(redis_port);
}

}  // namespace tessera::gloo_backend

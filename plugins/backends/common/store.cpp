#include "common/store.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <thread>

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/redis_store.h>

#include "tessera/sdk/error.hpp"

namespace tessera::backend_store {
namespace {

// gloo's FileStore with its presence check made callable: the check is a
// protected member meant for derived stores.
class ProbedFileStore final : public gloo::rendezvous::FileStore {
 public:
  explicit ProbedFileStore(const std::string& path) : FileStore(path) {}
  bool present(const std::vector<std::string>& keys) { return check(keys); }
};

class FileRendezvous final : public Store {
 public:
  FileRendezvous(const std::string& dir, const std::string& plugin)
      : Store(plugin), dir_(dir), store_(make(dir, plugin)) {}

  gloo::rendezvous::Store& gloo() noexcept override { return *store_; }

  bool has(const std::vector<std::string>& keys) override {
    try {
      return store_->present(keys);
    } catch (const std::exception& e) {
      throw Error(TESSERA_ERR_INTERNAL,
                  detail::concat(plugin(), ": cannot read the ", description(), ": ", e.what()));
    }
  }

  [[nodiscard]] std::string description() const override { return "file store at '" + dir_ + "'"; }

 private:
  static std::unique_ptr<ProbedFileStore> make(const std::string& dir, const std::string& plugin) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat(plugin, ": the file store directory '", dir,
                                 "' does not exist or is not a directory (option store_dir or "
                                 "TESSERA_RENDEZVOUS_DIR)"));
    }
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat(plugin, ": the file store directory '", dir,
                                 "' is not writable by this process"));
    }
    try {
      return std::make_unique<ProbedFileStore>(dir);
    } catch (const std::exception& e) {
      throw Error(
          TESSERA_ERR_INVALID_ARGUMENT,
          detail::concat(plugin, ": cannot open the file store at '", dir, "': ", e.what()));
    }
  }

  std::string dir_;
  std::unique_ptr<ProbedFileStore> store_;
};

class RedisRendezvous final : public Store {
 public:
  RedisRendezvous(const std::string& host, int32_t port, const std::string& plugin)
      : Store(plugin), host_(host), port_(port), store_(make(host, port, plugin)) {}

  gloo::rendezvous::Store& gloo() noexcept override { return *store_; }

  bool has(const std::vector<std::string>& keys) override {
    try {
      return store_->check(keys);
    } catch (const std::exception& e) {
      throw Error(TESSERA_ERR_INTERNAL,
                  detail::concat(plugin(), ": cannot read the ", description(), ": ", e.what()));
    }
  }

  [[nodiscard]] std::string description() const override {
    return "Redis store at " + host_ + ":" + std::to_string(port_);
  }

 private:
  static std::unique_ptr<gloo::rendezvous::RedisStore> make(const std::string& host, int32_t port,
                                                            const std::string& plugin) {
    try {
      return std::make_unique<gloo::rendezvous::RedisStore>(host, port);
    } catch (const std::exception& e) {
      throw Error(TESSERA_ERR_PEER_LOST,
                  detail::concat(plugin, ": cannot reach the Redis store at ", host, ":", port,
                                 " (options redis_host / redis_port): ", e.what()));
    }
  }

  std::string host_;
  int32_t port_;
  std::unique_ptr<gloo::rendezvous::RedisStore> store_;
};

constexpr std::string_view kStartHint =
    "start every rank with `tessera launch -n N -- <program>` (or torchrun), which sets RANK "
    "and WORLD_SIZE";

// The integer in environment variable `name`; throws naming it when it is
// unset or not an integer.
int64_t env_int(const EnvLookup& env, const char* name, const std::string& plugin) {
  const auto value = env(name);
  if (!value) {
    throw Error(
        TESSERA_ERR_INVALID_ARGUMENT,
        detail::concat(plugin, ": environment variable ", name,
                       " is not set, so this process does not know its rank; ", kStartHint));
  }
  const auto parsed = parse_int(*value);
  if (!parsed) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat(plugin, ": environment variable ", name, "='", *value,
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

}  // namespace

std::optional<int64_t> parse_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0') return std::nullopt;
  return static_cast<int64_t>(v);
}

Ranks resolve_ranks(const EnvLookup& env, const tessera_backend_config& config,
                    const std::string& plugin) {
  const int64_t size = env_int(env, "WORLD_SIZE", plugin);
  const int64_t rank = env_int(env, "RANK", plugin);
  TESSERA_CHECK(size >= 1 && size <= 65536, TESSERA_ERR_INVALID_ARGUMENT, plugin,
                ": WORLD_SIZE=", size, " must be in 1..65536; ", kStartHint);
  TESSERA_CHECK(rank >= 0 && rank < size, TESSERA_ERR_INVALID_ARGUMENT, plugin, ": RANK=", rank,
                " is outside [0, WORLD_SIZE=", size, "); ", kStartHint);
  Ranks r;
  r.world_size = static_cast<int32_t>(size);
  r.rank = static_cast<int32_t>(rank);
  if (config.world_size != -1) {
    TESSERA_CHECK(config.world_size == r.world_size, TESSERA_ERR_INVALID_ARGUMENT, plugin,
                  ": the configured world_size = ", config.world_size,
                  " differs from WORLD_SIZE=", r.world_size,
                  " of the environment; set [run] world_size to -1 or to the number of "
                  "processes started");
  }
  return r;
}

EnvLookup process_environment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read once at creation
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::string StoreConfig::description() const {
  if (kind == StoreKind::kFile) return "file store at '" + dir + "'";
  return "Redis store at " + redis_host + ":" + std::to_string(redis_port);
}

StoreConfig resolve_store_config(const sdk::Options& options, const EnvLookup& env,
                                 const std::string& plugin) {
  StoreConfig c;
  const std::string store = options.get_string("store");
  if (store == "file") {
    c.kind = StoreKind::kFile;
    c.dir = option_or_env(options, "store_dir", env, "TESSERA_RENDEZVOUS_DIR", "");
    TESSERA_CHECK(!c.dir.empty(), TESSERA_ERR_INVALID_ARGUMENT, plugin,
                  ": the file store needs a directory shared by all ranks: set option "
                  "store_dir or environment variable TESSERA_RENDEZVOUS_DIR (`tessera launch` "
                  "sets it)");
  } else if (store == "redis") {
    c.kind = StoreKind::kRedis;
    c.redis_host = option_or_env(options, "redis_host", env, "MASTER_ADDR", "127.0.0.1");
    const int64_t port = options.get_int("redis_port");
    TESSERA_CHECK(port >= 1 && port <= 65535, TESSERA_ERR_INVALID_ARGUMENT, plugin,
                  " option redis_port must be in 1..65535, got ", port);
    c.redis_port = static_cast<int32_t>(port);
  } else {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, detail::concat(plugin, " option store = '", store,
                                                             "' is not \"file\" or \"redis\""));
  }
  c.run_id = option_or_env(options, "run_id", env, "TESSERA_RUN_ID", "tessera");
  return c;
}

void Store::put(const std::string& key, const std::vector<char>& value) {
  try {
    gloo().set(key, value);
  } catch (const std::exception& e) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat(plugin_, ": cannot write key '", key, "' to the ", description(),
                               ": ", e.what(),
                               " (a key of this run already exists: use a fresh store directory "
                               "or another run_id)"));
  }
}

std::vector<char> Store::await(const std::string& key, int64_t timeout_ms,
                               const std::string& awaited) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto pause = std::chrono::milliseconds(2);
  while (!has({key})) {
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    if (timeout_ms >= 0 && waited >= timeout_ms) {
      throw Error(TESSERA_ERR_TIMEOUT,
                  detail::concat(plugin_, ": waiting for ", awaited, " (key '", key, "') in the ",
                                 description(), " timed out after ", waited, " ms"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  try {
    return gloo().get(key);
  } catch (const std::exception& e) {
    throw Error(TESSERA_ERR_INTERNAL, detail::concat(plugin_, ": cannot read key '", key,
                                                     "' from the ", description(), ": ", e.what()));
  }
}

std::unique_ptr<Store> open_store(const StoreConfig& config, const std::string& plugin) {
  if (config.kind == StoreKind::kFile) return std::make_unique<FileRendezvous>(config.dir, plugin);
  return std::make_unique<RedisRendezvous>(config.redis_host, config.redis_port, plugin);
}

}  // namespace tessera::backend_store

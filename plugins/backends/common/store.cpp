#include "common/store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <thread>

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/redis_store.h>

#include "common/tcp_store.hpp"
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

// The name of the file whose exclusive creation claims `key` in a file
// store: the key with every byte outside [A-Za-z0-9._-] written as %XX,
// behind "claim." (gloo names its files by a decimal hash, never so). A
// long key keeps its first 160 characters and gains the hex of its 64-bit
// FNV-1a, which keeps the name within any file system's limit.
std::string claim_file_name(const std::string& key) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string name = "claim.";
  for (const char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    if (plain) {
      name += ch;
    } else {
      name += '%';
      name += kHex[c >> 4U];
      name += kHex[c & 15U];
    }
  }
  constexpr size_t kMaxName = 200;
  if (name.size() <= kMaxName) return name;
  uint64_t hash = 14695981039346656037ULL;
  for (const char ch : key) {
    hash ^= static_cast<unsigned char>(ch);
    hash *= 1099511628211ULL;
  }
  name.resize(160);
  name += '.';
  for (int shift = 60; shift >= 0; shift -= 4)
    name += kHex[(hash >> static_cast<unsigned>(shift)) & 15U];
  return name;
}

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

  bool put_if_absent(const std::string& key, const std::vector<char>& value) override {
    const std::string claim = dir_ + "/" + claim_file_name(key);
    const int fd = ::open(claim.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int error = errno;
      if (error == EEXIST) return false;  // another rank claimed it first
      throw Error(TESSERA_ERR_INTERNAL,
                  detail::concat(plugin(), ": cannot claim key '", key, "' in the ", description(),
                                 " (creating '", claim, "'): ",
                                 std::error_code(error, std::generic_category()).message()));
    }
    ::close(fd);
    put(key, value);
    return true;
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

  bool put_if_absent(const std::string& key, const std::vector<char>& value) override {
    try {
      // gloo's RedisStore::set is a SETNX that throws when the key exists.
      store_->set(key, value);
      return true;
    } catch (const std::exception& e) {
      if (has({key})) return false;  // another rank wrote it first
      throw Error(TESSERA_ERR_INTERNAL, detail::concat(plugin(), ": cannot write key '", key,
                                                       "' to the ", description(), ": ", e.what()));
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

// gloo's store interface on a TCP store client: get and wait block in the
// server, bounded by the run's timeout (gloo's zero timeout means "the
// default", which is the run's timeout here).
class GlooTcpStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooTcpStore(const StoreConfig& config)
      : client_(config.tcp_host, config.tcp_port, config.run_id, config.timeout_ms,
                config.tcp_source()),
        timeout_ms_(config.timeout_ms) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    client_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override { return client_.get(key, timeout_ms_); }
  void wait(const std::vector<std::string>& keys) override { client_.wait(keys, timeout_ms_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    client_.wait(keys, timeout.count() > 0 ? static_cast<int64_t>(timeout.count()) : timeout_ms_);
  }

  TcpStoreClient& client() noexcept { return client_; }

 private:
  TcpStoreClient client_;
  int64_t timeout_ms_;
};

class TcpRendezvous final : public Store {
 public:
  TcpRendezvous(const StoreConfig& config, const std::string& plugin)
      : Store(plugin), store_(make(config, plugin)) {}

  gloo::rendezvous::Store& gloo() noexcept override { return *store_; }

  bool has(const std::vector<std::string>& keys) override {
    try {
      return store_->client().check(keys);
    } catch (const Error& e) {
      throw Error(e.status(), detail::concat(plugin(), ": ", e.what()));
    }
  }

  bool put_if_absent(const std::string& key, const std::vector<char>& value) override {
    try {
      return store_->client().compare_and_set(key, std::nullopt, value).swapped;
    } catch (const Error& e) {
      throw Error(e.status(), detail::concat(plugin(), ": ", e.what()));
    }
  }

  [[nodiscard]] std::string description() const override { return store_->client().description(); }

 private:
  static std::unique_ptr<GlooTcpStore> make(const StoreConfig& config, const std::string& plugin) {
    try {
      return std::make_unique<GlooTcpStore>(config);
    } catch (const Error& e) {
      throw Error(e.status(), detail::concat(plugin, ": ", e.what()));
    }
  }

  std::unique_ptr<GlooTcpStore> store_;
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
  if (kind == StoreKind::kTcp) {
    return "TCP store at " + tcp_host + ":" + std::to_string(tcp_port) + " (" + tcp_source() + ")";
  }
  return "Redis store at " + redis_host + ":" + std::to_string(redis_port);
}

StoreConfig resolve_store_config(const sdk::Options& options, const EnvLookup& env,
                                 const std::string& plugin) {
  StoreConfig c;
  std::string store = options.get_string("store");
  const auto served = env("TESSERA_STORE_ADDR");
  const bool launcher_store = served && !served->empty();
  if (store.empty()) {
    const auto addr = env("MASTER_ADDR");
    const auto port = env("MASTER_PORT");
    const bool master = addr && !addr->empty() && port && !port->empty();
    store = master || launcher_store ? "tcp" : "file";
  }
  if (store == "tcp" && launcher_store) {
    c.kind = StoreKind::kTcp;
    c.tcp_served_elsewhere = true;
    const size_t colon = served->rfind(':');
    const auto parsed =
        colon == std::string::npos ? std::nullopt : parse_int(served->substr(colon + 1));
    TESSERA_CHECK(
        colon != std::string::npos && colon > 0 && parsed && *parsed >= 1 && *parsed <= 65535,
        TESSERA_ERR_INVALID_ARGUMENT, plugin, ": environment variable TESSERA_STORE_ADDR='",
        *served, "' is not host:port with a port in 1..65535 (the TCP store a launcher serves)");
    c.tcp_host = served->substr(0, colon);
    c.tcp_port = static_cast<int32_t>(*parsed);
  } else if (store == "tcp") {
    c.kind = StoreKind::kTcp;
    const auto addr = env("MASTER_ADDR");
    const auto port = env("MASTER_PORT");
    TESSERA_CHECK(addr && !addr->empty() && port && !port->empty(), TESSERA_ERR_INVALID_ARGUMENT,
                  plugin,
                  ": the TCP store needs MASTER_ADDR and MASTER_PORT (the address and port rank "
                  "0 serves it on; `tessera launch` sets them)");
    const auto parsed = parse_int(*port);
    TESSERA_CHECK(parsed && *parsed >= 1 && *parsed <= 65535, TESSERA_ERR_INVALID_ARGUMENT, plugin,
                  ": environment variable MASTER_PORT='", *port,
                  "' is not a port number in 1..65535 (the TCP store's port)");
    c.tcp_host = *addr;
    c.tcp_port = static_cast<int32_t>(*parsed);
  } else if (store == "file") {
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
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat(plugin, " option store = '", store,
                               "' is not \"tcp\", \"file\" or \"redis\""));
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
  if (config.kind == StoreKind::kTcp) return std::make_unique<TcpRendezvous>(config, plugin);
  return std::make_unique<RedisRendezvous>(config.redis_host, config.redis_port, plugin);
}

StoreService::StoreService(const StoreConfig& config, const std::string& plugin, Log log)
    : config_(config), plugin_(plugin), log_(std::move(log)) {
  try {
    server_ = std::make_unique<TcpStoreServer>(config.tcp_host, config.tcp_port);
  } catch (const Error& e) {
    throw Error(e.status(),
                detail::concat(plugin, " (rank 0, MASTER_ADDR:MASTER_PORT): ", e.what()));
  }
  if (log_) {
    log_(detail::concat(plugin_, ": rank 0 serves the TCP store on ", config_.tcp_host, ":",
                        server_->port()));
  }
}

StoreService::~StoreService() {
  const auto linger =
      std::chrono::milliseconds(config_.timeout_ms > 0 ? config_.timeout_ms : 60000);
  // The clients first (bounded): a rank still reading a key gets it before
  // the run's keys go, then the server stops.
  const size_t connected = server_->connections();
  const size_t stragglers = server_->await_clients(linger);
  const size_t removed = server_->erase_prefix(config_.run_id + "/");
  (void)server_->stop(std::chrono::milliseconds(0));
  if (!log_) return;
  try {
    log_(detail::concat(plugin_, ": the TCP store on ", config_.tcp_host, ":", server_->port(),
                        " removed the ", removed, " keys of run '", config_.run_id,
                        "' and stopped holding ", server_->count(""), " keys, ", stragglers, " of ",
                        connected, " clients still connected",
                        stragglers == 0 ? "" : " after waiting for them"));
  } catch (...) {
    // A destructor reports what it can.
  }
}

int32_t StoreService::port() const noexcept { return server_->port(); }

std::shared_ptr<StoreService> serve_store(const StoreConfig& config, int32_t rank,
                                          const std::string& plugin, StoreService::Log log) {
  if (config.kind != StoreKind::kTcp || rank != 0 || config.tcp_served_elsewhere) return nullptr;
  return std::make_shared<StoreService>(config, plugin, std::move(log));
}

}  // namespace tessera::backend_store

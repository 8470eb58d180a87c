// The host's rendezvous store as a plugin sees it (host ABI 1.8), and what a
// backend whose ranks are processes needs around it: the options that name
// the store, their environment fallbacks (MASTER_ADDR, MASTER_PORT,
// TESSERA_STORE_ADDR, TESSERA_RENDEZVOUS_DIR, TESSERA_RUN_ID) and the
// process's rank from RANK and WORLD_SIZE. Header-only; the store itself
// (TCP, file, Redis) is the host's, so every backend shares one.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/c/backend.h"
#include "tessera/c/host.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"

namespace tessera::sdk {

// ---- the options and environment that name a store ----

// The option declarations naming the store, for a backend's option table.
inline constexpr tessera_option_decl kStoreOption = {
    "store", TESSERA_OPT_STRING, "",
    "rendezvous store: \"tcp\" (served by rank 0 on $MASTER_ADDR:$MASTER_PORT), \"file\" (a "
    "directory every rank can reach) or \"redis\"; empty: tcp when MASTER_ADDR and MASTER_PORT "
    "are set, else file"};
inline constexpr tessera_option_decl kStoreDirOption = {
    "store_dir", TESSERA_OPT_STRING, "",
    "directory of the file store; empty: $TESSERA_RENDEZVOUS_DIR (set by `tessera launch`)"};
inline constexpr tessera_option_decl kRedisHostOption = {
    "redis_host", TESSERA_OPT_STRING, "",
    "host of the Redis store; empty: $MASTER_ADDR, else 127.0.0.1"};
inline constexpr tessera_option_decl kRedisPortOption = {"redis_port", TESSERA_OPT_INT, "6379",
                                                         "port of the Redis store (1..65535)"};
inline constexpr tessera_option_decl kRunIdOption = {
    "run_id", TESSERA_OPT_STRING, "",
    "namespace of this run's rendezvous keys; empty: $TESSERA_RUN_ID, else \"tessera\""};

// Reads one environment variable; std::nullopt when unset. Injected so that
// settings can be resolved from a fake environment.
using EnvLookup = std::function<std::optional<std::string>(const char*)>;

// The process environment (getenv).
inline EnvLookup process_environment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read at creation
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

// Parses a whole decimal integer; std::nullopt for anything else.
inline std::optional<int64_t> parse_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0') return std::nullopt;
  return static_cast<int64_t>(v);
}

// This process's place in the world.
struct Ranks {
  int32_t rank = 0;        // from RANK
  int32_t world_size = 1;  // from WORLD_SIZE
};

namespace store_detail {
inline constexpr std::string_view kStartHint =
    "start every rank with `tessera launch -n N -- <program>` (or torchrun), which sets RANK "
    "and WORLD_SIZE";

// The integer in environment variable `name`; throws naming it when it is
// unset or not an integer.
inline int64_t env_int(const EnvLookup& env, const char* name, const std::string& plugin) {
  const auto value = env(name);
  if (!value) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                ::tessera::detail::concat(plugin, ": environment variable ", name,
                                          " is not set, so this process does not know its rank; ",
                                          kStartHint));
  }
  const auto parsed = parse_int(*value);
  if (!parsed) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                ::tessera::detail::concat(plugin, ": environment variable ", name, "='", *value,
                                          "' is not an integer; ", kStartHint));
  }
  return *parsed;
}

// The option `key` if not empty, else environment variable `var` if set and
// not empty, else `fallback`.
inline std::string option_or_env(const Options& options, const char* key, const EnvLookup& env,
                                 const char* var, const std::string& fallback) {
  std::string value = options.get_string(key);
  if (!value.empty()) return value;
  if (const auto from_env = env(var); from_env && !from_env->empty()) return *from_env;
  return fallback;
}
}  // namespace store_detail

// Reads RANK and WORLD_SIZE and checks them against the host's configured
// world size (-1: any). Throws Error(INVALID_ARGUMENT) naming `plugin`, the
// variable and how to start the ranks (`tessera launch -n N -- ...`).
inline Ranks resolve_ranks(const EnvLookup& env, const tessera_backend_config& config,
                           const std::string& plugin) {
  using store_detail::kStartHint;
  const int64_t size = store_detail::env_int(env, "WORLD_SIZE", plugin);
  const int64_t rank = store_detail::env_int(env, "RANK", plugin);
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

// Where the rendezvous keys live.
enum class StoreKind { kFile, kRedis, kTcp };

// What a store handle is for besides reaching the store.
enum class StoreUse {
  kClient,  // only that
  kServe,   // this process (rank 0) serves the TCP store while the handle is open
  kHoldRun  // it stands for this process in the run: the last such handle closed
            // removes the run's keys
};

struct StoreSettings {
  StoreKind kind = StoreKind::kFile;
  std::string dir;         // kFile
  std::string redis_host;  // kRedis
  int32_t redis_port = 6379;
  std::string tcp_host;  // kTcp: $MASTER_ADDR, or the host of $TESSERA_STORE_ADDR
  int32_t tcp_port = 0;  // kTcp: $MASTER_PORT, or the port of $TESSERA_STORE_ADDR
  // kTcp: from TESSERA_STORE_ADDR, which a launcher sets when it serves the
  // store itself (`tessera launch --tolerate-failures`): no rank serves it,
  // so it outlives any rank, rank 0 included.
  bool tcp_served_elsewhere = false;
  std::string run_id;  // key namespace
  // How long a rank tries to reach the store, and the bound of the replies
  // it waits for (< 0: none). The plugin sets its own timeout here.
  int64_t timeout_ms = 60000;

  // "file store at 'DIR'", "Redis store at HOST:PORT" or "TCP store at
  // HOST:PORT (MASTER_ADDR:MASTER_PORT)" (or "(TESSERA_STORE_ADDR)"), for
  // messages.
  [[nodiscard]] std::string description() const {
    if (kind == StoreKind::kFile) return "file store at '" + dir + "'";
    if (kind == StoreKind::kTcp) {
      return "TCP store at " + tcp_host + ":" + std::to_string(tcp_port) + " (" + source() + ")";
    }
    return "Redis store at " + redis_host + ":" + std::to_string(redis_port);
  }
  // Where the store's address came from.
  [[nodiscard]] const char* source() const noexcept {
    if (kind == StoreKind::kTcp) {
      return tcp_served_elsewhere ? "TESSERA_STORE_ADDR" : "MASTER_ADDR:MASTER_PORT";
    }
    return kind == StoreKind::kRedis ? "options redis_host / redis_port"
                                     : "option store_dir or TESSERA_RENDEZVOUS_DIR";
  }
  // Whether the process of `rank` serves the TCP store (rank 0, unless a
  // launcher serves it).
  [[nodiscard]] bool served_by(int32_t rank) const noexcept {
    return kind == StoreKind::kTcp && rank == 0 && !tcp_served_elsewhere;
  }
  // The handle a backend's process keeps open for the run: rank 0 serves
  // the TCP store that a rank serves (a joining process never does), and
  // removes the run's keys when it stops; where no rank serves the store
  // (file, Redis, a launcher's TCP store) every process holds the run, so
  // the last one to finish removes its keys. kClient: nothing to keep.
  [[nodiscard]] StoreUse process_use(int32_t rank, bool joining) const noexcept {
    if (served_by(0)) return !joining && rank == 0 ? StoreUse::kServe : StoreUse::kClient;
    return StoreUse::kHoldRun;
  }
};

// Resolves the store options (kStoreOption ... kRunIdOption, which the
// plugin must declare) and their environment fallbacks. Without a `store`
// option, the store is "tcp" when TESSERA_STORE_ADDR, or MASTER_ADDR and
// MASTER_PORT, are set (and not empty), else "file". The TCP store is at
// TESSERA_STORE_ADDR ("host:port", served by the launcher) when it is set,
// else at MASTER_ADDR:MASTER_PORT, served by rank 0. Throws
// Error(INVALID_ARGUMENT) naming `plugin` and the option or variable that is
// missing or wrong.
inline StoreSettings resolve_store_settings(const Options& options, const EnvLookup& env,
                                            const std::string& plugin) {
  StoreSettings c;
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
    c.dir = store_detail::option_or_env(options, "store_dir", env, "TESSERA_RENDEZVOUS_DIR", "");
    TESSERA_CHECK(!c.dir.empty(), TESSERA_ERR_INVALID_ARGUMENT, plugin,
                  ": the file store needs a directory shared by all ranks: set option "
                  "store_dir or environment variable TESSERA_RENDEZVOUS_DIR (`tessera launch` "
                  "sets it)");
  } else if (store == "redis") {
    c.kind = StoreKind::kRedis;
    c.redis_host =
        store_detail::option_or_env(options, "redis_host", env, "MASTER_ADDR", "127.0.0.1");
    const int64_t port = options.get_int("redis_port");
    TESSERA_CHECK(port >= 1 && port <= 65535, TESSERA_ERR_INVALID_ARGUMENT, plugin,
                  " option redis_port must be in 1..65535, got ", port);
    c.redis_port = static_cast<int32_t>(port);
  } else {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                ::tessera::detail::concat(plugin, " option store = '", store,
                                          "' is not \"tcp\", \"file\" or \"redis\""));
  }
  c.run_id = store_detail::option_or_env(options, "run_id", env, "TESSERA_RUN_ID", "tessera");
  return c;
}

// ---- the store ----

// What a compare-and-set left.
struct StoreCas {
  bool swapped = false;                    // the value became `desired`
  std::optional<std::vector<char>> value;  // the key's value now; nullopt: absent
};

// One open handle on the host's store. Move-only; closed on destruction.
// Thread-safe as the host's calls are. Every failure throws tessera::Error
// with the host's message, behind "<plugin>: ".
class Store {
 public:
  // Opens the store `settings` name. With StoreUse::kServe (rank 0 of a
  // store settings.served_by), this process first serves the TCP store on
  // its address; closing the handle then waits for the other ranks
  // (bounded by the timeout), removes the run's keys and stops serving.
  // With kHoldRun the handle counts as one of the run's processes until it
  // closes; the last to close removes the run's keys. Throws
  // Error(UNSUPPORTED) when the host is older than ABI 1.8.
  Store(const Host& host, const StoreSettings& settings, std::string plugin,
        StoreUse use = StoreUse::kClient)
      : host_(host), plugin_(std::move(plugin)) {
    const tessera_host_api* api = host_.raw();
    TESSERA_CHECK(
        api != nullptr &&
            api->struct_size >= offsetof(tessera_host_api, store_delete_prefix) + sizeof(void*) &&
            api->store_open != nullptr,
        TESSERA_ERR_UNSUPPORTED, plugin_,
        ": the host has no rendezvous store (needs host ABI 1.8; this host has ",
        api != nullptr ? api->abi_major : 0, ".", api != nullptr ? api->abi_minor : 0, ")");
    tessera_store_config c{};
    c.struct_size = sizeof c;
    std::string host_name;
    switch (settings.kind) {
      case StoreKind::kTcp:
        c.kind = TESSERA_STORE_TCP;
        host_name = settings.tcp_host;
        c.port = settings.tcp_port;
        break;
      case StoreKind::kRedis:
        c.kind = TESSERA_STORE_REDIS;
        host_name = settings.redis_host;
        c.port = settings.redis_port;
        break;
      case StoreKind::kFile:
        c.kind = TESSERA_STORE_FILE;
        break;
    }
    c.host = host_name.c_str();
    c.dir = settings.dir.c_str();
    c.ns = settings.run_id.c_str();
    c.timeout_ms = settings.timeout_ms;
    c.source = settings.source();
    c.serve = use == StoreUse::kServe ? 1 : 0;
    c.hold_run = use == StoreUse::kHoldRun ? 1 : 0;
    call(api->store_open(api->ctx, &c, &store_));
  }
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  Store(Store&& other) noexcept
      : host_(other.host_), plugin_(std::move(other.plugin_)), store_(other.store_) {
    other.store_ = nullptr;
  }
  Store& operator=(Store&&) = delete;
  ~Store() {
    if (store_ != nullptr) host_.raw()->store_close(host_.raw()->ctx, store_);
  }

  // "TCP store at HOST:PORT (MASTER_ADDR:MASTER_PORT)", "file store at
  // 'DIR'" or "Redis store at HOST:PORT".
  [[nodiscard]] std::string description() const {
    return host_.raw()->store_description(host_.raw()->ctx, store_);
  }
  [[nodiscard]] const std::string& plugin() const noexcept { return plugin_; }

  // Writes `value` under `key`, replacing a value there.
  void set(const std::string& key, const std::vector<char>& value) {
    call(api()->store_set(api()->ctx, store_, key.c_str(), value.data(), value.size()));
  }

  // Waits until `key` exists and returns its value; TIMEOUT after
  // `timeout_ms` (< 0: waits forever).
  [[nodiscard]] std::vector<char> get(const std::string& key, int64_t timeout_ms) {
    Received out;
    call(api()->store_get(api()->ctx, store_, key.c_str(), timeout_ms, &sink, &out));
    return out.take(plugin_, key);
  }

  // Like get(), with a TIMEOUT message naming what was `awaited` ("the
  // unique id of rank 0 of group 'world'").
  [[nodiscard]] std::vector<char> await(const std::string& key, int64_t timeout_ms,
                                        const std::string& awaited) {
    Received out;
    const tessera_status s =
        api()->store_get(api()->ctx, store_, key.c_str(), timeout_ms, &sink, &out);
    if (s == TESSERA_ERR_TIMEOUT) {
      throw Error(s, ::tessera::detail::concat(plugin_, ": waiting for ", awaited, " (key '", key,
                                               "') in the ", description(), " timed out after ",
                                               timeout_ms, " ms"));
    }
    call(s);
    return out.take(plugin_, key);
  }

  // Adds `delta` to the integer under `key` (absent: 0) atomically; returns
  // the new value.
  int64_t add(const std::string& key, int64_t delta) {
    int64_t out = 0;
    call(api()->store_add(api()->ctx, store_, key.c_str(), delta, &out));
    return out;
  }

  // Atomically: when the key's value equals `expected` (nullopt: the key is
  // absent), it becomes `desired`.
  StoreCas compare_and_set(const std::string& key, const std::optional<std::vector<char>>& expected,
                           const std::vector<char>& desired) {
    int32_t swapped = 0;
    Received now;
    static const char empty = 0;
    const void* want = expected ? (expected->empty() ? &empty : expected->data()) : nullptr;
    call(api()->store_compare_set(api()->ctx, store_, key.c_str(), want,
                                  expected ? expected->size() : 0, desired.data(), desired.size(),
                                  &swapped, &sink, &now));
    StoreCas r;
    r.swapped = swapped != 0;
    if (now.present) r.value = now.take(plugin_, key);
    return r;
  }

  // Writes `value` under `key` only if no one has: of several ranks racing
  // for the key, exactly one wins. Returns whether this call wrote it; a
  // loser reads the winner's value with await().
  bool put_if_absent(const std::string& key, const std::vector<char>& value) {
    return compare_and_set(key, std::nullopt, value).swapped;
  }

  // Waits until every key exists; TIMEOUT naming those still missing.
  void wait(const std::vector<std::string>& keys, int64_t timeout_ms) {
    const std::vector<const char*> raw = c_keys(keys);
    call(api()->store_wait(api()->ctx, store_, raw.data(), raw.size(), timeout_ms));
  }

  // True when every key exists; never waits.
  [[nodiscard]] bool has(const std::vector<std::string>& keys) {
    const std::vector<const char*> raw = c_keys(keys);
    int32_t present = 0;
    call(api()->store_check(api()->ctx, store_, raw.data(), raw.size(), &present));
    return present != 0;
  }

  // Removes every key of the run that starts with `prefix`; returns how many.
  int64_t delete_prefix(const std::string& prefix) {
    int64_t removed = 0;
    call(api()->store_delete_prefix(api()->ctx, store_, prefix.c_str(), &removed));
    return removed;
  }

 private:
  [[nodiscard]] const tessera_host_api* api() const noexcept { return host_.raw(); }

  // A value the host hands over through `sink`. Nothing may be thrown
  // back through the host's C frames, so a copy that fails is recorded and
  // thrown once the host's call has returned.
  struct Received {
    std::vector<char> value;
    bool present = false;
    bool failed = false;
    std::vector<char> take(const std::string& plugin, const std::string& key) {
      TESSERA_CHECK(!failed, TESSERA_ERR_OUT_OF_MEMORY, plugin,
                    ": no memory to copy the value of key '", key, "' from the store");
      return std::move(value);
    }
  };
  static void sink(void* user, const void* data, uint64_t size) noexcept {
    auto* out = static_cast<Received*>(user);
    out->present = true;
    try {
      const auto* p = static_cast<const char*>(data);
      out->value.assign(p, p + size);
    } catch (...) {
      out->failed = true;
    }
  }

  static std::vector<const char*> c_keys(const std::vector<std::string>& keys) {
    std::vector<const char*> raw;
    raw.reserve(keys.size());
    for (const auto& k : keys) raw.push_back(k.c_str());
    return raw;
  }

  // Throws the host's message behind "<plugin>: " for a failed call.
  void call(tessera_status status) const {
    if (status == TESSERA_OK) return;
    const tessera_host_api* a = api();
    const char* msg = a->last_error != nullptr ? a->last_error(a->ctx) : nullptr;
    throw Error(status,
                ::tessera::detail::concat(
                    plugin_, ": ", (msg != nullptr && *msg != '\0') ? msg : status_name(status)));
  }

  Host host_;
  std::string plugin_;
  tessera_store* store_ = nullptr;
};

}  // namespace tessera::sdk

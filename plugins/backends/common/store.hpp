// The rendezvous store of the backends that run one process per rank: the
// TCP store rank 0 serves on MASTER_ADDR:MASTER_PORT (tcp_store.hpp), gloo's
// file store (a directory every rank can reach) or its Redis store, the
// options that choose it, and waiting for a key another rank writes.
// Shared by the gloo and nccl plugins; messages name the plugin using it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "tessera/c/backend.h"
#include "tessera/c/plugin.h"
#include "tessera/sdk/host.hpp"

namespace tessera::backend_store {

class TcpStoreServer;

// The option declarations naming the store, for a plugin's option table.
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
EnvLookup process_environment();

// Parses a whole decimal integer; std::nullopt for anything else.
std::optional<int64_t> parse_int(const std::string& text);

// This process's place in the world.
struct Ranks {
  int32_t rank = 0;        // from RANK
  int32_t world_size = 1;  // from WORLD_SIZE
};

// Reads RANK and WORLD_SIZE and checks them against the host's configured
// world size (-1: any). Throws Error(INVALID_ARGUMENT) naming `plugin`, the
// variable and how to start the ranks (`tessera launch -n N -- ...`).
Ranks resolve_ranks(const EnvLookup& env, const tessera_backend_config& config,
                    const std::string& plugin);

// Where the rendezvous keys live.
enum class StoreKind { kFile, kRedis, kTcp };

struct StoreConfig {
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
  // kTcp: how long a rank tries to reach the store, and the bound of the
  // replies it waits for (< 0: none). The plugin sets its own timeout here.
  int64_t timeout_ms = 60000;

  // "file store at 'DIR'", "Redis store at HOST:PORT" or "TCP store at
  // HOST:PORT (MASTER_ADDR:MASTER_PORT)" (or "(TESSERA_STORE_ADDR)"), for
  // messages.
  [[nodiscard]] std::string description() const;
  // Where the TCP store's address came from: "MASTER_ADDR:MASTER_PORT" or
  // "TESSERA_STORE_ADDR".
  [[nodiscard]] const char* tcp_source() const noexcept {
    return tcp_served_elsewhere ? "TESSERA_STORE_ADDR" : "MASTER_ADDR:MASTER_PORT";
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
StoreConfig resolve_store_config(const sdk::Options& options, const EnvLookup& env,
                                 const std::string& plugin);

// A store shared by every rank of a run. Thread-compatible: used by one
// thread at a time (rendezvous happens in connect, split and shrink, which
// are collective and not concurrent on one process).
class Store {
 public:
  explicit Store(std::string plugin) : plugin_(std::move(plugin)) {}
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  virtual ~Store() = default;

  // The gloo store, for gloo's own rendezvous and for PrefixStores on it.
  virtual gloo::rendezvous::Store& gloo() noexcept = 0;

  // True when every key is present. Never waits for absent keys. Throws
  // Error(INTERNAL) naming the store when it cannot be read.
  virtual bool has(const std::vector<std::string>& keys) = 0;

  // "file store at '/tmp/x'" or "Redis store at host:port".
  [[nodiscard]] virtual std::string description() const = 0;

  // Writes `value` under `key`. Throws Error(INVALID_ARGUMENT) naming the key
  // and the store when it cannot (the file store refuses a key that already
  // exists: a reused run id).
  void put(const std::string& key, const std::vector<char>& value);

  // Writes `value` under `key` only if no one has: of several ranks racing
  // for the key, exactly one wins. Returns whether this call wrote it; a
  // loser reads the winner's value with await(). TCP store: one
  // compare-and-set on the server; file store: the winner creates a claim
  // file next to the keys (O_EXCL), then writes the key, so a loser may
  // find it absent for a moment; Redis store: SETNX. Throws Error naming
  // the key and the store when it cannot write.
  virtual bool put_if_absent(const std::string& key, const std::vector<char>& value) = 0;

  // Waits until `key` is present and returns its value. Throws
  // Error(TIMEOUT) after `timeout_ms` (< 0: waits forever) naming the key,
  // the store and `awaited` ("the unique id of rank 0 of group 'world'").
  std::vector<char> await(const std::string& key, int64_t timeout_ms, const std::string& awaited);

  [[nodiscard]] const std::string& plugin() const noexcept { return plugin_; }

 private:
  std::string plugin_;
};

// Opens the store `config` names for `plugin`. Throws Error(INVALID_ARGUMENT)
// naming the directory when it does not exist or is not writable,
// Error(PEER_LOST) naming host and port when the Redis server cannot be
// reached, or Error(TIMEOUT) naming MASTER_ADDR:MASTER_PORT and the timeout
// when no TCP store answers there in time.
std::unique_ptr<Store> open_store(const StoreConfig& config, const std::string& plugin);

// The TCP store served by rank 0 for the whole run. On destruction it waits
// (at most the config's timeout, or 60 s when it has none) for the other
// ranks to disconnect, so a late reader is not cut off, then removes the
// run's keys, reports them through `log` and stops.
class StoreService {
 public:
  using Log = std::function<void(const std::string&)>;
  StoreService(const StoreConfig& config, const std::string& plugin, Log log);
  StoreService(const StoreService&) = delete;
  StoreService& operator=(const StoreService&) = delete;
  ~StoreService();

  // The port it listens on.
  [[nodiscard]] int32_t port() const noexcept;

 private:
  std::unique_ptr<TcpStoreServer> server_;
  StoreConfig config_;
  std::string plugin_;
  Log log_;
};

// The service `config` asks this process to host: a StoreService for the
// TCP store on rank 0, nullptr otherwise. Throws Error(INVALID_ARGUMENT)
// naming `plugin`, MASTER_ADDR:MASTER_PORT and the address when it cannot
// bind it (in use, or not an address of this machine).
std::shared_ptr<StoreService> serve_store(const StoreConfig& config, int32_t rank,
                                          const std::string& plugin, StoreService::Log log);

}  // namespace tessera::backend_store

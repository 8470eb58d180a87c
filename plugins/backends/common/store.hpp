// The rendezvous store of the backends that run one process per rank:
// gloo's file store (a directory every rank can reach) or its Redis store,
// the options that choose it, and waiting for a key another rank writes.
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

// The option declarations naming the store, for a plugin's option table.
inline constexpr tessera_option_decl kStoreOption = {
    "store", TESSERA_OPT_STRING, "file",
    "rendezvous store: \"file\" (a directory every rank can reach) or \"redis\""};
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
enum class StoreKind { kFile, kRedis };

struct StoreConfig {
  StoreKind kind = StoreKind::kFile;
  std::string dir;         // kFile
  std::string redis_host;  // kRedis
  int32_t redis_port = 6379;
  std::string run_id;  // key namespace

  // "file store at 'DIR'" or "Redis store at HOST:PORT", for messages.
  [[nodiscard]] std::string description() const;
};

// Resolves the store options (kStoreOption ... kRunIdOption, which the
// plugin must declare) and their environment fallbacks. Throws
// Error(INVALID_ARGUMENT) naming `plugin` and the option or variable that is
// missing or wrong.
StoreConfig resolve_store_config(const sdk::Options& options, const EnvLookup& env,
                                 const std::string& plugin);

// A store shared by every rank of a run. Thread-compatible: used by one
// thread at a time (rendezvous happens in connect and split, which are
// collective and not concurrent on one process).
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

  // Waits until `key` is present and returns its value. Throws
  // Error(TIMEOUT) after `timeout_ms` (< 0: waits forever) naming the key,
  // the store and `awaited` ("the unique id of rank 0 of group 'world'").
  std::vector<char> await(const std::string& key, int64_t timeout_ms, const std::string& awaited);

  [[nodiscard]] const std::string& plugin() const noexcept { return plugin_; }

 private:
  std::string plugin_;
};

// Opens the store `config` names for `plugin`. Throws Error(INVALID_ARGUMENT)
// naming the directory when it does not exist or is not writable, or
// Error(PEER_LOST) naming host and port when the Redis server cannot be
// reached.
std::unique_ptr<Store> open_store(const StoreConfig& config, const std::string& plugin);

}  // namespace tessera::backend_store

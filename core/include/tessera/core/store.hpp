// The host's key-value store: the one place where the ranks of a run that
// runs one process per rank meet (rendezvous, bootstrap ids, membership
// agreement, join queues). Three kinds behind one interface:
//   - TCP: a small server (tcp_store.hpp) that rank 0 or a launcher serves
//     on MASTER_ADDR:MASTER_PORT; nothing else to install or share;
//   - file: a directory every rank can reach (a shared file system);
//   - Redis: a Redis server (when the host is built with hiredis).
// Backend plugins reach it through the host table (tessera/c/host.h, ABI
// 1.8, and tessera/sdk/store.hpp); the launcher uses it directly. Every key
// lives under the store's namespace ("<ns>/<key>"), so runs sharing a store
// never see each other's keys.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tessera::store {

enum class Kind { kTcp, kFile, kRedis };

// What to open.
struct Config {
  Kind kind = Kind::kTcp;
  std::string host;  // kTcp, kRedis
  int32_t port = 0;  // kTcp, kRedis
  std::string dir;   // kFile
  // Namespace of every key; "" for none.
  std::string ns;
  // How long opening tries to reach the store, and the bound of every reply
  // waited for by an operation without a timeout of its own (< 0: none).
  int64_t timeout_ms = 60000;
  // Where the address came from, named in messages ("MASTER_ADDR:MASTER_PORT",
  // "TESSERA_STORE_ADDR", "options redis_host / redis_port"); may be empty.
  std::string source;
};

// What a compare-and-set left.
struct CasResult {
  bool swapped = false;                    // the value became `desired`
  std::optional<std::vector<char>> value;  // the key's value now; nullopt: absent
};

// One connection to a store. Thread-safe. Every failure throws
// tessera::Error: TIMEOUT naming the keys waited for and how long,
// PEER_LOST when the store cannot be reached any more, INVALID_ARGUMENT
// for a request the store refuses (add on a value that is not an integer),
// INTERNAL for an I/O error; messages name the store (description()).
class Store {
 public:
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  virtual ~Store() = default;

  // "TCP store at HOST:PORT (MASTER_ADDR:MASTER_PORT)", "file store at
  // 'DIR'", "Redis store at HOST:PORT".
  [[nodiscard]] virtual std::string description() const = 0;

  // Writes `value` under `key`, replacing a value there.
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;

  // Waits until `key` exists and returns its value; TIMEOUT after
  // `timeout_ms` (< 0: waits forever).
  virtual std::vector<char> get(const std::string& key, int64_t timeout_ms) = 0;

  // Adds `delta` to the integer under `key` (absent: 0) atomically and
  // returns the new value, kept as decimal text (get() returns e.g. "3").
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // Atomically: when the key's value equals `expected` (nullopt: the key is
  // absent), it becomes `desired`. Of several callers racing to create a
  // key with expected = nullopt exactly one wins.
  virtual CasResult compare_and_set(const std::string& key,
                                    const std::optional<std::vector<char>>& expected,
                                    const std::vector<char>& desired) = 0;

  // Waits until every key exists; TIMEOUT naming the keys still missing
  // after `timeout_ms` (< 0: waits forever).
  virtual void wait(const std::vector<std::string>& keys, int64_t timeout_ms) = 0;

  // True when every key exists; never waits.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Removes every key of the namespace that starts with `prefix` ("": all
  // of them); returns how many.
  virtual int64_t delete_prefix(const std::string& prefix) = 0;
};

// Opens the store `config` names. Throws Error(TIMEOUT) when no TCP store
// answers within the timeout, Error(PEER_LOST) when the Redis server cannot
// be reached, Error(INVALID_ARGUMENT) when the directory of a file store
// does not exist or is not writable, or when this build has no Redis
// support; every message names the store and config.source.
std::unique_ptr<Store> open(const Config& config);

// The kinds one by one (open() dispatches to them).
std::unique_ptr<Store> open_file(const Config& config);
std::unique_ptr<Store> open_redis(const Config& config);

// Whether this build can open Redis stores (it was built with hiredis).
bool has_redis() noexcept;

}  // namespace tessera::store

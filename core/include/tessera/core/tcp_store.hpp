// The TCP kind of the host's store (store.hpp):
// a server on a background thread (hosted by rank 0 on
// MASTER_ADDR:MASTER_PORT) and a client every rank opens to it.
//
// Wire format: every message is a 4-byte big-endian length followed by that
// many bytes. A request starts with an operation byte, a reply with a status
// byte (ok, timeout, error); integers are 8-byte big-endian, strings and
// values a 4-byte length and their bytes. A client first says hello (magic
// and version), so a program on the port that is not a store is named as
// such instead of being talked to.
//
// Every blocking operation carries its own timeout, which the server
// enforces; the client additionally bounds every reply it waits for, so a
// server that is gone or stops answering is an error, never a hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/store.hpp"

namespace tessera::store {

// The server. Thread-safe. Serves each connection on a thread of its own.
class TcpStoreServer {
 public:
  // Binds `host`:`port` (port 0: one the system picks, see port()) and
  // starts accepting. A loopback `host` is bound as is; any other address
  // binds every local address of its family, so that clients reaching this
  // machine under another name or interface are served too. Throws
  // Error(INVALID_ARGUMENT) naming host and port when the address is in use
  // or cannot be bound, or the host does not resolve.
  TcpStoreServer(const std::string& host, int32_t port);
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  // Stops at once (stop(0 ms)).
  ~TcpStoreServer();

  // The port it listens on.
  [[nodiscard]] int32_t port() const noexcept { return port_; }

  // Clients connected now.
  [[nodiscard]] size_t connections() const;

  // Clients that have connected since it started, gone or not.
  [[nodiscard]] size_t accepted() const;

  // Keys under `prefix` (every key: "").
  [[nodiscard]] size_t count(const std::string& prefix) const;

  // Waits at most `linger` until no client is connected; returns how many
  // still are.
  size_t await_clients(std::chrono::milliseconds linger) const;

  // Removes every key under `prefix`; returns how many.
  size_t erase_prefix(const std::string& prefix);

  // Waits at most `linger` for every client to disconnect, then closes the
  // connections left (their blocked operations fail) and stops. Returns the
  // number of clients still connected when it stopped. Idempotent.
  size_t stop(std::chrono::milliseconds linger);

 private:
  struct State;
  std::unique_ptr<State> state_;
  int32_t port_ = 0;
};

// A connection to a store. Thread-safe: one request at a time (a blocking
// get holds the connection until it returns).
class TcpStoreClient final : public Store {
 public:
  // Connects to `host`:`port`, retrying until `timeout_ms` (< 0: forever) has
  // passed, and checks that a store answers. Every key is stored under
  // "`ns`/" (nothing when `ns` is empty), so runs with different namespaces
  // never see each other's keys. `timeout_ms` also bounds the replies to the
  // operations without a timeout of their own. `what` names the address in
  // messages, e.g. "MASTER_ADDR:MASTER_PORT". Throws Error(TIMEOUT) naming
  // the address and the timeout when nothing answers, Error(INVALID_ARGUMENT)
  // when what answers is not a store.
  TcpStoreClient(std::string host, int32_t port, std::string ns, int64_t timeout_ms,
                 std::string what = "");
  TcpStoreClient(const TcpStoreClient&) = delete;
  TcpStoreClient& operator=(const TcpStoreClient&) = delete;
  ~TcpStoreClient() override;

  // "TCP store at HOST:PORT", for messages.
  [[nodiscard]] std::string description() const override;

  // This end's address on the connection (numeric, e.g. "127.0.0.1"): the
  // address of this machine on the route to the store, which the other
  // clients can reach it at too.
  [[nodiscard]] std::string local_address() const;

  // Writes `value` under `key` (replacing a value there).
  void set(const std::string& key, const std::vector<char>& value) override;

  // Waits until `key` exists and returns its value. Throws Error(TIMEOUT)
  // naming the key after `timeout_ms` (< 0: waits forever).
  std::vector<char> get(const std::string& key, int64_t timeout_ms) override;

  // Adds `delta` to the integer under `key` (absent: 0) atomically and
  // returns the new value. The value is kept as decimal text, so get()
  // returns e.g. "3". Throws Error(INVALID_ARGUMENT) when the key holds
  // something else.
  int64_t add(const std::string& key, int64_t delta) override;

  // Atomically: when the key's value equals `expected` (nullopt: the key is
  // absent), it becomes `desired`. Returns whether it did and the value now.
  CasResult compare_and_set(const std::string& key,
                            const std::optional<std::vector<char>>& expected,
                            const std::vector<char>& desired) override;

  // Waits until every key exists. Throws Error(TIMEOUT) naming the keys still
  // missing after `timeout_ms` (< 0: waits forever).
  void wait(const std::vector<std::string>& keys, int64_t timeout_ms) override;

  // True when every key exists; never waits for them.
  bool check(const std::vector<std::string>& keys) override;

  // Removes every key of this namespace that starts with `prefix` (""
  // removes them all); returns how many.
  int64_t delete_prefix(const std::string& prefix) override;

  // Keys of this namespace that start with `prefix`.
  int64_t count(const std::string& prefix);

 private:
  std::vector<char> request(const std::vector<char>& body, int64_t reply_timeout_ms,
                            const std::string& doing);
  [[nodiscard]] std::string full_key(const std::string& key) const;
  // Sends operation `op` on the keys under `prefix` ("<what> under
  // '<prefix>'" in errors) and returns the count in the reply.
  int64_t prefix_request(uint8_t op, const std::string& prefix, const std::string& what);

  std::string host_;
  int32_t port_;
  std::string ns_;
  int64_t timeout_ms_;
  std::string what_;
  std::mutex mutex_;
  int fd_ = -1;
  bool broken_ = false;
};

}  // namespace tessera::store

// The rendezvous store through which ranks find each other: gloo's file
// store (a directory every rank can reach) or its Redis store.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "settings.hpp"

namespace tessera::gloo_backend {

// A store shared by every rank of a run. Thread-compatible: used by one
// thread at a time (rendezvous happens in connect and split, which are
// collective and not concurrent on one process).
class Store {
 public:
  Store() = default;
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
};

// Opens the store the settings name. Throws Error(INVALID_ARGUMENT) naming
// the directory when it does not exist or is not writable, or Error(PEER_LOST)
// naming host and port when the Redis server cannot be reached.
std::unique_ptr<Store> open_store(const Settings& settings);

}  // namespace tessera::gloo_backend

// The host's rendezvous store (tessera/sdk/store.hpp) as the gloo plugin
// uses it, and gloo's own store interface on top of it, through which
// gloo's rendezvous exchanges the pairs' addresses.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "settings.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/store.hpp"

namespace tessera::gloo_backend {

using Store = sdk::Store;

// A new connection to the store the settings name, for `use`.
inline std::unique_ptr<Store> open_store(const sdk::Host& host, const Settings& settings,
                                         sdk::StoreUse use = sdk::StoreUse::kClient) {
  return std::make_unique<Store>(host, settings.store, "gloo", use);
}

// gloo's store interface on the host's store: get and wait block in the
// store, bounded by the run's timeout (gloo's zero timeout means "the
// default", which is the run's timeout here).
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(sdk::Store& store, int64_t timeout_ms) : store_(store), timeout_ms_(timeout_ms) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override { return store_.get(key, timeout_ms_); }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys, timeout_ms_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    store_.wait(keys, timeout.count() > 0 ? static_cast<int64_t>(timeout.count()) : timeout_ms_);
  }

 private:
  sdk::Store& store_;
  int64_t timeout_ms_;
};

}  // namespace tessera::gloo_backend

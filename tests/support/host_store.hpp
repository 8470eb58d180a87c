// The host's rendezvous store opened as a plugin opens it (sdk::Store over
// the host table), for tests of plugin code that talks to the store
// without loading a plugin.
#pragma once

#include <memory>
#include <string>

#include "tessera/core/host_api.hpp"
#include "tessera/sdk/store.hpp"

namespace tessera::test {

// The host table of a plugin named "backend.test"; lives as long as the
// process.
inline const sdk::Host& store_test_host() {
  static const HostContext context("backend.test");
  static const sdk::Host host(context.api());
  return host;
}

// A file store in `dir` under run id `run_id`, for `plugin`'s messages.
inline std::unique_ptr<sdk::Store> file_store(const std::string& dir,
                                              const std::string& plugin = "test",
                                              const std::string& run_id = "run") {
  sdk::StoreSettings settings;
  settings.kind = sdk::StoreKind::kFile;
  settings.dir = dir;
  settings.run_id = run_id;
  return std::make_unique<sdk::Store>(store_test_host(), settings, plugin);
}

}  // namespace tessera::test

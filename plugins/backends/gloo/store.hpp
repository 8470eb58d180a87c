// The rendezvous store through which ranks find each other: the file or
// Redis store shared with the other process backends (common/store.hpp).
#pragma once

#include <memory>

#include "common/store.hpp"
#include "settings.hpp"

namespace tessera::gloo_backend {

using Store = backend_store::Store;

// Opens the store the settings name (see backend_store::open_store).
inline std::unique_ptr<Store> open_store(const Settings& settings) {
  return backend_store::open_store(settings.store, "gloo");
}

}  // namespace tessera::gloo_backend

// The store calls of the host table (ABI 1.8): the rendezvous store of
// tessera/core/store.hpp behind tessera_host_api's store_* functions.
#pragma once

#include "tessera/c/host.h"

namespace tessera {

// Fills api's store_* functions.
void install_store_calls(tessera_host_api& api) noexcept;

}  // namespace tessera

// Handing the bytes of an ncclUniqueId from one rank of a group to the
// others through the rendezvous store. No CUDA here, so the exchange is
// tested without a GPU (with a made-up id).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/sdk/store.hpp"

namespace tessera::nccl_backend {

// Rank `root` of the group under `prefix` calls `make` and writes its bytes
// under "<prefix>/unique_id"; every other rank waits for them (at most
// `timeout_ms`, < 0: forever) and gets them back. All ranks return the same
// bytes. Throws Error(TIMEOUT) naming the key, the store and `group` when
// the root never writes, Error(INVALID_ARGUMENT) when the key already exists
// (a reused run id) and Error(MISMATCH) when the stored value does not have
// `bytes` bytes.
std::vector<char> share_unique_id(sdk::Store& store, const std::string& prefix,
                                  const std::string& group, int32_t rank, int32_t root,
                                  size_t bytes, const std::function<std::vector<char>()>& make,
                                  int64_t timeout_ms);

}  // namespace tessera::nccl_backend

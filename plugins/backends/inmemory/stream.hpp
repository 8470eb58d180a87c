// Cache-bypassing copies for large results.
//
// When a collective's output is much larger than the caches, writing it with
// ordinary stores first reads every destination line into the cache (read
// for ownership) and later writes it back: three memory transfers per line.
// Non-temporal stores write the line without reading it, so large outputs
// cost one transfer. The data path reduces into a small L1-resident tile and
// streams the tile to every destination.
#pragma once

#include <cstddef>

namespace tessera::inmemory {

// Bytes of the tile that reductions on the streaming path go through.
inline constexpr size_t kStreamTileBytes = size_t{8} << 10;
// Bytes of the blocks ranks claim on the streaming path.
inline constexpr size_t kStreamBlockBytes = size_t{64} << 10;

// Copies `bytes` from `src` to `dst` (not overlapping) with non-temporal
// stores where the CPU has them, plain memcpy otherwise. The stores are
// weakly ordered: call stream_fence() before publishing the data.
void stream_copy(void* dst, const void* src, size_t bytes) noexcept;

// Orders all earlier stream_copy stores before later stores of this thread.
void stream_fence() noexcept;

}  // namespace tessera::inmemory

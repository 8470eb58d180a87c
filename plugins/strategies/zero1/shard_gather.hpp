// The parameter allgather of `zero1`: after each rank has updated its shard
// of the replicated flat parameters, every rank receives every other
// rank's shard. Shards are even_shard() pieces of the flat range, padded so
// they have the same length; the padding exists only on the wire.
#pragma once

#include <cstdint>
#include <span>

#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/strategy.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::strategies {

// Gathers the padded shards in chunks of at most `chunk` elements per rank
// through two staging buffers tracked as TESSERA_MEM_COMM (chunk elements
// to send, world x chunk to receive), so the flat parameter buffer keeps
// its exact size (no padding) and the extra memory is bounded by the chunk,
// not the model. Each chunk is one allgather; every rank posts the same
// sequence. With one rank nothing is communicated. Not copyable; `comm`
// must outlive it.
class ShardGather {
 public:
  // `total`: flat elements of the model; `chunk`: elements per rank and
  // allgather (clamped to [1, shard size]). Throws tessera::Error (invalid
  // argument) for a bad world size or rank (see sdk::even_shard).
  ShardGather(const sdk::Host& host, sdk::CommView& comm, uint64_t total, uint64_t chunk);
  ShardGather(const ShardGather&) = delete;
  ShardGather& operator=(const ShardGather&) = delete;
  ~ShardGather() = default;

  // This rank's shard of the flat range.
  [[nodiscard]] const sdk::ShardRange& shard() const noexcept { return shard_; }
  // Elements per rank in one allgather.
  [[nodiscard]] uint64_t chunk() const noexcept { return chunk_; }

  // Collective. `params` holds the `total` flat elements; this rank's real
  // shard elements are sent, and every other rank's real shard elements are
  // overwritten with what that rank sent. Throws tessera::Error (internal)
  // for a buffer of another size, and the backend's error when an allgather
  // fails (the parameters are then partly updated).
  void gather(std::span<float> params);

 private:
  sdk::CommView& comm_;
  uint64_t total_;
  int32_t world_;
  int32_t rank_;
  sdk::ShardRange shard_;
  uint64_t chunk_;
  sdk::TrackedBuffer<float> send_;  // chunk_ elements
  sdk::TrackedBuffer<float> recv_;  // world_ * chunk_ elements
};

}  // namespace tessera::strategies

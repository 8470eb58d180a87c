// The parameter allgather of `zero1` (see shard_gather.hpp).
#include "shard_gather.hpp"

#include <algorithm>

#include "tessera/sdk/error.hpp"

namespace tessera::strategies {

namespace {
uint64_t clamp_chunk(uint64_t chunk, uint64_t shard_size) {
  return std::max<uint64_t>(1, std::min(chunk, shard_size));
}
}  // namespace

ShardGather::ShardGather(const sdk::Host& host, sdk::CommView& comm, uint64_t total, uint64_t chunk)
    : comm_(comm),
      total_(total),
      world_(comm.size()),
      rank_(comm.rank()),
      shard_(sdk::even_shard(total, comm.size(), comm.rank())),
      chunk_(clamp_chunk(chunk, shard_.shard_size)),
      send_(host, rank_, TESSERA_MEM_COMM, world_ > 1 ? static_cast<size_t>(chunk_) : 0),
      recv_(host, rank_, TESSERA_MEM_COMM,
            world_ > 1 ? static_cast<size_t>(chunk_) * static_cast<size_t>(world_) : 0) {}

void ShardGather::gather(std::span<float> params) {
  TESSERA_CHECK(params.size() == total_, TESSERA_ERR_INTERNAL, "zero1: parameter buffer of ",
                params.size(), " elements for a model of ", total_);
  if (world_ <= 1) return;
  const uint64_t size = shard_.shard_size;
  for (uint64_t c = 0; c < size; c += chunk_) {
    const uint64_t n = std::min(chunk_, size - c);
    // This rank's elements [begin, begin + n) of the padded range; the
    // part past the model's end is padding and sent as zeros.
    const uint64_t begin = shard_.padded.begin + c;
    const uint64_t real = begin < total_ ? std::min(n, total_ - begin) : 0;
    std::copy_n(params.begin() + static_cast<std::ptrdiff_t>(begin), real, send_.data());
    std::fill(send_.data() + real, send_.data() + n, 0.0F);
    comm_.allgather(std::span<const float>(send_.data(), n),
                    std::span<float>(recv_.data(), n * static_cast<uint64_t>(world_)));
    for (int32_t r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      const uint64_t dst = static_cast<uint64_t>(r) * size + c;
      if (dst >= total_) continue;
      const uint64_t count = std::min(n, total_ - dst);
      std::copy_n(recv_.data() + static_cast<uint64_t>(r) * n, count,
                  params.begin() + static_cast<std::ptrdiff_t>(dst));
    }
  }
}

}  // namespace tessera::strategies

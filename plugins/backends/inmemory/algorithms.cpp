#include "algorithms.hpp"

#include <algorithm>
#include <cstring>

#include "group.hpp"
#include "stream.hpp"
#include "tessera/sdk/reduce.hpp"

namespace tessera::inmemory {

namespace {

// How this rank writes its outputs for one operation.
struct Writer {
  bool stream = false;  // non-temporal stores (large outputs)

  void copy(void* dst, const void* src, uint64_t bytes) const noexcept {
    if (bytes == 0 || dst == src) return;
    if (stream) {
      stream_copy(dst, src, static_cast<size_t>(bytes));
    } else {
      std::memcpy(dst, src, static_cast<size_t>(bytes));
    }
  }
};

// Reduces `count` elements starting at element `first` of every rank's send
// buffer and writes the result to each of `targets` (element 0 of each
// target receives element `first`). Cached path: into targets[0], then
// copied on while still in cache. Streaming path: tile by tile into the
// L1-resident scratch tile, then streamed to every target.
void reduce_block(const Group& group, const Call& me, uint64_t first, uint64_t count,
                  const std::vector<std::byte*>& targets, const Writer& writer,
                  ShareScratch& scratch) {
  const int32_t p = group.size();
  const size_t esz = tessera_dtype_size(me.dtype);
  std::vector<const void*>& sources = scratch.sources;
  sources.resize(static_cast<size_t>(p));
  const auto fill_sources = [&](uint64_t at) {
    for (int32_t i = 0; i < p; ++i) sources[i] = group.call(i).send + at * esz;
  };
  if (!writer.stream) {
    fill_sources(first);
    sdk::reduce_sources(targets[0], sources.data(), sources.size(), count, me.dtype, me.op);
    for (size_t t = 1; t < targets.size(); ++t) writer.copy(targets[t], targets[0], count * esz);
    return;
  }
  const uint64_t step = std::max<uint64_t>(1, kStreamTileBytes / esz);
  for (uint64_t at = 0; at < count; at += step) {
    const uint64_t len = std::min(step, count - at);
    fill_sources(first + at);
    sdk::reduce_sources(scratch.tile.data(), sources.data(), sources.size(), len, me.dtype, me.op);
    for (std::byte* t : targets) writer.copy(t + at * esz, scratch.tile.data(), len * esz);
  }
}

// Claims blocks of the reduction `me` until none is left. `segments` equal
// parts of `segment` elements each (allreduce and reduce: one segment of all
// elements; reduce_scatter: one per rank) are cut into blocks; block j of
// segment q reduces elements [q * segment + j * block, ...) of the sends
// into the segment's targets.
template <typename TargetsOf>
void reduce_claimed(Group& group, const Call& me, int32_t segments, const Writer& writer,
                    ShareScratch& scratch, TargetsOf&& targets_of) {
  const uint64_t segment = me.count;
  if (segment == 0) return;
  const size_t esz = tessera_dtype_size(me.dtype);
  const size_t block_bytes =
      writer.stream ? kStreamBlockBytes : group.engine().settings.block_bytes;
  const uint64_t block = std::max<uint64_t>(1, block_bytes / esz);
  const uint64_t per_segment = (segment + block - 1) / block;
  const uint64_t total = per_segment * static_cast<uint64_t>(segments);
  for (uint64_t k = group.claim_block(); k < total; k = group.claim_block()) {
    const uint64_t q = k / per_segment;
    const uint64_t at = (k % per_segment) * block;
    const uint64_t len = std::min(block, segment - at);
    std::vector<std::byte*>& targets = scratch.targets;
    targets.clear();
    targets_of(static_cast<int32_t>(q), targets);
    for (std::byte*& t : targets) t += at * esz;
    reduce_block(group, me, q * segment + at, len, targets, writer, scratch);
  }
}

// Bytes of all ranks' send and recv buffers together (the data the
// operation touches), which decides between the paths.
uint64_t footprint_bytes(const Call& me, int32_t size) noexcept {
  const uint64_t n = me.count * tessera_dtype_size(me.dtype);
  const auto p = static_cast<uint64_t>(size);
  switch (me.coll) {
    case TESSERA_COLL_ALLGATHER:
    case TESSERA_COLL_REDUCE_SCATTER:
      return p * (n + n * p);
    case TESSERA_COLL_ALLTOALL:
      return p * 2 * n * p;
    default:
      return p * 2 * n;
  }
}

}  // namespace

bool streams(const Call& me, int32_t size, uint64_t threshold) noexcept {
  return threshold > 0 && footprint_bytes(me, size) >= threshold;
}

void run_share(Group& group, int32_t rank, ShareScratch& scratch) {
  const Call& me = group.call(rank);
  const int32_t p = group.size();
  const uint64_t nbytes = me.count * tessera_dtype_size(me.dtype);
  const auto r = static_cast<uint64_t>(rank);
  const Writer writer{streams(me, p, group.engine().settings.stream_bytes) &&
                      scratch.tile.size() >= kStreamTileBytes};
  switch (me.coll) {
    case TESSERA_COLL_ALLREDUCE:
      // The claiming rank's own recv first: it is written, then copied.
      reduce_claimed(group, me, 1, writer, scratch, [&](int32_t, std::vector<std::byte*>& t) {
        t.push_back(me.recv);
        for (int32_t i = 0; i < p; ++i) {
          if (i != rank) t.push_back(group.call(i).recv);
        }
      });
      break;
    case TESSERA_COLL_REDUCE:
      reduce_claimed(group, me, 1, writer, scratch, [&](int32_t, std::vector<std::byte*>& t) {
        t.push_back(group.call(me.root).recv);
      });
      break;
    case TESSERA_COLL_REDUCE_SCATTER:
      reduce_claimed(group, me, p, writer, scratch, [&](int32_t q, std::vector<std::byte*>& t) {
        t.push_back(group.call(q).recv);
      });
      break;
    case TESSERA_COLL_ALLGATHER:
      for (int32_t i = 0; i < p; ++i) {
        writer.copy(me.recv + static_cast<uint64_t>(i) * nbytes, group.call(i).send, nbytes);
      }
      break;
    case TESSERA_COLL_BROADCAST:
      writer.copy(me.recv, group.call(me.root).send, nbytes);
      break;
    case TESSERA_COLL_GATHER:
      writer.copy(group.call(me.root).recv + r * nbytes, me.send, nbytes);
      break;
    case TESSERA_COLL_SCATTER:
      writer.copy(me.recv, group.call(me.root).send + r * nbytes, nbytes);
      break;
    case TESSERA_COLL_ALLTOALL:
      for (int32_t i = 0; i < p; ++i) {
        writer.copy(me.recv + static_cast<uint64_t>(i) * nbytes, group.call(i).send + r * nbytes,
                    nbytes);
      }
      break;
    default:
      break;  // barrier, split: the protocol is the whole operation
  }
  if (writer.stream) stream_fence();
}

}  // namespace tessera::inmemory

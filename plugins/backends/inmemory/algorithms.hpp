// Data movement of the in-memory collectives: once an operation committed,
// each rank does its share straight between the buffers every rank
// published, so all ranks work in parallel and no data is staged.
//
// Reductions (allreduce, reduce, reduce_scatter) are cut into blocks of
// block_kb (64 KiB on the streaming path). Ranks claim blocks from a counter
// of the group, so each block is done by exactly one rank: with every rank
// running the work splits evenly, and when ranks outnumber cores a running
// rank takes over the blocks of one that is not scheduled. The rank that
// claims a block reduces that block of every rank's send buffer and writes
// the result into every target:
//  allreduce       every rank's recv buffer (a reduce-scatter and an
//                  allgather fused: the block is reduced into the claiming
//                  rank's recv and copied to the others while in cache).
//  reduce          the root's recv buffer.
//  reduce_scatter  blocks range over all ranks' outputs: block j of rank q's
//                  recv is the reduction of that part of block q of the sends.
// In place is safe: a block of any buffer is only read and written by the
// one rank that claimed it, and each element's sources are combined in rank
// order, so every rank holds bit-identical results.
// Copies are done by each rank for itself:
//  allgather       rank r copies every rank's send into its own recv blocks.
//  broadcast       rank r copies the root's send into its recv.
//  gather          rank r copies its send into block r of the root's recv.
//  scatter         rank r copies block r of the root's send into its recv.
//  alltoall        rank r copies block r of every rank's send into its recv.
//  barrier         nothing (the protocol itself synchronises).
// A copy whose source and destination are the same memory is skipped, which
// makes the documented in-place forms work. When the buffers of all ranks
// together reach the stream_kb option (more than the caches hold), outputs
// are written with non-temporal stores (see stream.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::inmemory {

class Group;
struct Call;

// Scratch space of one rank, reused from one operation to the next.
struct ShareScratch {
  std::vector<const void*> sources;
  std::vector<std::byte*> targets;
  std::vector<std::byte> tile;  // kStreamTileBytes, for the streaming path
};

// Performs `rank`'s share of the committed operation whose calls `group`
// holds, claiming reduction blocks from the group. Never blocks and never
// fails for calls that passed validation and agree.
void run_share(Group& group, int32_t rank, ShareScratch& scratch);

// True when the buffers of all ranks of operation `me` together reach
// `threshold` bytes (> 0), so outputs are written with non-temporal stores
// (reductions through ShareScratch::tile).
bool streams(const Call& me, int32_t size, uint64_t threshold) noexcept;

}  // namespace tessera::inmemory

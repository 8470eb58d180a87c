// The collectives the benchmark knows: names, how a benchmark size maps to
// send/receive buffers, the bus-bandwidth factor, and the call itself.
//
// "size" follows nccl-tests: the per-rank data size for allreduce,
// broadcast and reduce; the total gathered size for allgather and gather;
// the total input size for reduce_scatter and scatter; the whole send
// buffer for alltoall.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/c/backend.h"
#include "tessera/core/comm.hpp"

namespace tessera::cli {

// The ops `bench collectives --op` accepts, comma separated, for messages.
std::string bench_op_list();
// Parses an op name ("allreduce", ...); nullopt if it is not a benchmarked op.
std::optional<tessera_coll_type> parse_bench_op(std::string_view name);
// Parses a dtype name ("f32", "bf16", ...); nullopt if unknown.
std::optional<tessera_dtype> parse_dtype(std::string_view name);
// Parses a reduction name ("sum", "avg", "min", "max", "prod"); nullopt if unknown.
std::optional<tessera_reduce_op> parse_redop(std::string_view name);
std::string dtype_list();
std::string redop_list();

// True for ops that apply a reduction operator.
bool op_reduces(tessera_coll_type op) noexcept;
// True when the size is split into one block per rank, so it must be a
// multiple of element size x ranks.
bool op_splits_by_rank(tessera_coll_type op) noexcept;
// busbw / algbw for `ranks` ranks: 2(n-1)/n for allreduce; (n-1)/n for
// allgather, reduce_scatter, alltoall, gather and scatter; 1 for broadcast
// and reduce.
double busbw_factor(tessera_coll_type op, int ranks) noexcept;

// Buffers of one rank for one size. `block` is the per-rank block count
// (elements) for ops split by rank, otherwise the whole count.
struct OpLayout {
  uint64_t send_count = 0;
  uint64_t recv_count = 0;  // 0 with in_place
  uint64_t block = 0;
  bool in_place = false;  // broadcast: one buffer, send == recv
};

// Layout for `bytes` (already a multiple of the op's unit) of `dtype` over
// `ranks` ranks.
OpLayout op_layout(tessera_coll_type op, uint64_t bytes, tessera_dtype dtype, int ranks) noexcept;

// Runs `op` once, blocking, with root 0. For in-place ops `recv` is ignored.
void run_op(Communicator& comm, tessera_coll_type op, const tessera_buffer& send,
            const tessera_buffer& recv, tessera_reduce_op redop);

// The arguments of the same call as run_op, for entry points that take a
// tessera_coll_args (struct_size is left for the Communicator to fill in;
// timeout 0: the communicator's). For in-place ops recv is set to send.
tessera_coll_args op_args(tessera_coll_type op, const tessera_buffer& send,
                          const tessera_buffer& recv, tessera_reduce_op redop) noexcept;

// Runs the same call as run_op through the backend's raw library call
// (Communicator::run_raw). Throws tessera::Error, with status UNSUPPORTED
// when the backend has no raw call for `op`.
void run_raw_op(Communicator& comm, tessera_coll_type op, const tessera_buffer& send,
                const tessera_buffer& recv, tessera_reduce_op redop);

}  // namespace tessera::cli

// Reductions: allreduce (in place and out of place), reduce (every root) and
// reduce_scatter, for every dtype x every op, with the counts of CaseParams
// cycling across the configurations (see case_util.hpp).
#include "case_util.hpp"
#include "cases.hpp"
#include "check.hpp"

namespace tessera::conformance {
namespace {

// Checks that `send` still holds rank's input after an out-of-place call.
void expect_input_kept(const Communicator& comm, const OpDesc& d, const TypedBuffer& send,
                       tessera_reduce_op op, uint64_t first_index = 0) {
  expect_values(
      comm, d, send, 0, send.count(),
      [&](uint64_t i) {
        return reduction_input(op, send.dtype(), comm.size(), comm.rank(), first_index + i);
      },
      "send buffer modified");
}

void allreduce_out_of_place(Communicator& comm, tessera_dtype dtype, tessera_reduce_op op,
                            uint64_t n) {
  const int size = comm.size();
  TypedBuffer send = reduction_buffer(op, dtype, size, comm.rank(), n);
  TypedBuffer recv = sentinel_buffer(dtype, n);
  const OpDesc d{"allreduce(out-of-place)", dtype, op, n};
  guarded(comm, d, [&] { comm.allreduce(send.view(), recv.view(), op); });
  expect_values(comm, d, recv, 0, n,
                [&](uint64_t i) { return reduction_expected(op, dtype, size, i); });
  expect_input_kept(comm, d, send, op);
}

void allreduce_in_place(Communicator& comm, tessera_dtype dtype, tessera_reduce_op op, uint64_t n) {
  const int size = comm.size();
  TypedBuffer buf = reduction_buffer(op, dtype, size, comm.rank(), n);
  const OpDesc d{"allreduce(in-place)", dtype, op, n};
  guarded(comm, d, [&] { comm.allreduce(buf.view(), buf.view(), op); });
  expect_values(comm, d, buf, 0, n,
                [&](uint64_t i) { return reduction_expected(op, dtype, size, i); });
}

}  // namespace

void allreduce(Communicator& comm, const CaseParams& p) {
  // The workhorse collective gets the full matrix out of place: every
  // dtype x op x count. In place, every dtype x op with the counts cycling.
  for_each_dtype_op([&](tessera_dtype dtype, tessera_reduce_op op, size_t k) {
    for (const auto n : p.counts) allreduce_out_of_place(comm, dtype, op, n);
    allreduce_in_place(comm, dtype, op, count_for(p, k));
  });
}

void allreduce_large(Communicator& comm, const CaseParams& p) {
  if (p.large_count == 0) return;
  allreduce_in_place(comm, TESSERA_F32, TESSERA_SUM, p.large_count);
  allreduce_out_of_place(comm, TESSERA_F32, TESSERA_MAX, p.large_count);
}

void reduce(Communicator& comm, const CaseParams& p) {
  const int size = comm.size();
  const int rank = comm.rank();
  // Every dtype x op; the root cycles with k, so every root meets every op
  // (5 ops and up to 4 ranks: k % size and k % 5 cover all pairs).
  for_each_dtype_op([&](tessera_dtype dtype, tessera_reduce_op op, size_t k) {
    const uint64_t n = count_for(p, k);
    const int root = static_cast<int>(k % static_cast<size_t>(size));
    TypedBuffer send = reduction_buffer(op, dtype, size, rank, n);
    // recv is ignored off the root: pass an empty view there.
    TypedBuffer recv = sentinel_buffer(dtype, rank == root ? n : 0);
    const OpDesc d{"reduce", dtype, op, n, root};
    guarded(comm, d, [&] {
      comm.reduce(send.view(), rank == root ? recv.view() : empty_buffer(dtype), op, root);
    });
    if (rank == root) {
      expect_values(comm, d, recv, 0, n,
                    [&](uint64_t i) { return reduction_expected(op, dtype, size, i); });
    }
    expect_input_kept(comm, d, send, op);
  });
}

void reduce_scatter(Communicator& comm, const CaseParams& p) {
  const int size = comm.size();
  const int rank = comm.rank();
  const auto usize = static_cast<uint64_t>(size);
  for_each_dtype_op([&](tessera_dtype dtype, tessera_reduce_op op, size_t k) {
    const uint64_t n = count_for(p, k);
    // Global index g = block * n + i; rank r receives the reduction of block r.
    TypedBuffer send = reduction_buffer(op, dtype, size, rank, n * usize);
    TypedBuffer recv = sentinel_buffer(dtype, n);
    const OpDesc d{"reduce_scatter", dtype, op, n};
    guarded(comm, d, [&] { comm.reduce_scatter(send.view(), recv.view(), op); });
    const uint64_t first = static_cast<uint64_t>(rank) * n;
    expect_values(comm, d, recv, 0, n,
                  [&](uint64_t i) { return reduction_expected(op, dtype, size, first + i); });
    expect_input_kept(comm, d, send, op);
  });
}

}  // namespace tessera::conformance

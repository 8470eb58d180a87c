// Data movement: broadcast, allgather, gather, scatter and alltoall, for every
// dtype and every root, the counts of CaseParams cycling across the
// configurations (see case_util.hpp). The payload of each block
// identifies its source, so a block from the wrong rank is reported.
#include "case_util.hpp"
#include "cases.hpp"
#include "check.hpp"

namespace tessera::conformance {
namespace {

// Salts keep the payloads of different cases apart.
constexpr int kBroadcastSalt = 1;
constexpr int kAllgatherSalt = 2;
constexpr int kGatherSalt = 3;
constexpr int kScatterSalt = 4;
constexpr int kAlltoallSalt = 5;

// Source id of the block that `root` scatters to rank `dest`.
int scatter_source(int root, int dest, int size) noexcept { return root * size + dest; }

// Source id of the alltoall block that rank `src` sends to rank `dst`.
int alltoall_source(int src, int dst, int size) noexcept { return src * size + dst; }

// In place: the root's buffer is both source and destination.
void broadcast_in_place(Communicator& comm, tessera_dtype dtype, uint64_t n, int root) {
  const bool is_root = comm.rank() == root;
  TypedBuffer buf =
      is_root ? data_buffer(dtype, n, root, kBroadcastSalt) : sentinel_buffer(dtype, n);
  const OpDesc d{"broadcast(in-place)", dtype, -1, n, root};
  guarded(comm, d, [&] { comm.broadcast(buf.view(), root); });
  expect_values(comm, d, buf, 0, n,
                [&](uint64_t i) { return data_value(root, i, kBroadcastSalt); });
}

// Separate buffers through raw arguments: only the root passes a send
// buffer; every rank, the root included, receives into recv.
void broadcast_separate(Communicator& comm, tessera_dtype dtype, uint64_t n, int root) {
  const bool is_root = comm.rank() == root;
  const auto expected = [&](uint64_t i) { return data_value(root, i, kBroadcastSalt); };
  TypedBuffer send = data_buffer(dtype, is_root ? n : 0, root, kBroadcastSalt);
  TypedBuffer recv = sentinel_buffer(dtype, n);
  const OpDesc d{"broadcast(separate buffers)", dtype, -1, n, root};
  auto args =
      make_args(TESSERA_COLL_BROADCAST, is_root ? send.view() : empty_buffer(dtype), recv.view());
  args.root = root;
  guarded(comm, d, [&] { comm.run(args); });
  expect_values(comm, d, recv, 0, n, expected);
  expect_values(comm, d, send, 0, send.count(), expected, "root's send buffer modified");
}

// Calls f(dtype, root, k) for every dtype x root, k counting from 0.
template <typename F>
void for_each_dtype_root(int size, F&& f) {
  size_t k = 0;
  for (const auto dtype : kAllDtypes) {
    for (int root = 0; root < size; ++root) f(dtype, root, k++);
  }
}

}  // namespace

void broadcast(Communicator& comm, const CaseParams& p) {
  // Every dtype x root; in place and separate buffers alternate, so every
  // root is used with both.
  for_each_dtype_root(comm.size(), [&](tessera_dtype dtype, int root, size_t k) {
    if ((k / static_cast<size_t>(comm.size()) + static_cast<size_t>(root)) % 2 == 0) {
      broadcast_in_place(comm, dtype, count_for(p, k), root);
    } else {
      broadcast_separate(comm, dtype, count_for(p, k), root);
    }
  });
  if (p.large_count > 0) broadcast_in_place(comm, TESSERA_F32, p.large_count, comm.size() - 1);
}

void allgather(Communicator& comm, const CaseParams& p) {
  const int size = comm.size();
  const auto usize = static_cast<uint64_t>(size);
  for_each_dtype_count(p, [&](tessera_dtype dtype, uint64_t n, size_t /*k*/) {
    TypedBuffer send = data_buffer(dtype, n, comm.rank(), kAllgatherSalt);
    TypedBuffer recv = sentinel_buffer(dtype, n * usize);
    const OpDesc d{"allgather", dtype, -1, n};
    guarded(comm, d, [&] { comm.allgather(send.view(), recv.view()); });
    for (int src = 0; src < size; ++src) {
      expect_values(
          comm, d, recv, static_cast<uint64_t>(src) * n, n,
          [&](uint64_t i) { return data_value(src, i, kAllgatherSalt); },
          "block " + std::to_string(src) + " (from rank " + std::to_string(src) + ")");
    }
  });
}

void gather(Communicator& comm, const CaseParams& p) {
  const int size = comm.size();
  const int rank = comm.rank();
  const auto usize = static_cast<uint64_t>(size);
  for_each_dtype_root(size, [&](tessera_dtype dtype, int root, size_t k) {
    const uint64_t n = count_for(p, k);
    TypedBuffer send = data_buffer(dtype, n, rank, kGatherSalt + root);
    TypedBuffer recv = sentinel_buffer(dtype, rank == root ? n * usize : 0);
    const OpDesc d{"gather", dtype, -1, n, root};
    guarded(comm, d, [&] {
      comm.gather(send.view(), rank == root ? recv.view() : empty_buffer(dtype), root);
    });
    if (rank != root) return;
    for (int src = 0; src < size; ++src) {
      expect_values(
          comm, d, recv, static_cast<uint64_t>(src) * n, n,
          [&](uint64_t i) { return data_value(src, i, kGatherSalt + root); },
          "block " + std::to_string(src) + " (from rank " + std::to_string(src) + ")");
    }
  });
}

void scatter(Communicator& comm, const CaseParams& p) {
  const int size = comm.size();
  const int rank = comm.rank();
  const auto usize = static_cast<uint64_t>(size);
  for_each_dtype_root(size, [&](tessera_dtype dtype, int root, size_t k) {
    const uint64_t n = count_for(p, k);
    TypedBuffer send(dtype, rank == root ? n * usize : 0);
    if (rank == root) {
      for (int dest = 0; dest < size; ++dest) {
        fill_with(send, static_cast<uint64_t>(dest) * n, n, [&](uint64_t i) {
          return data_value(scatter_source(root, dest, size), i, kScatterSalt);
        });
      }
    }
    TypedBuffer recv = sentinel_buffer(dtype, n);
    const OpDesc d{"scatter", dtype, -1, n, root};
    guarded(comm, d, [&] {
      comm.scatter(rank == root ? send.view() : empty_buffer(dtype), recv.view(), root);
    });
    expect_values(comm, d, recv, 0, n, [&](uint64_t i) {
      return data_value(scatter_source(root, rank, size), i, kScatterSalt);
    });
  });
}

void alltoall(Communicator& comm, const CaseParams& p) {
  const int size = comm.size();
  const int rank = comm.rank();
  const auto usize = static_cast<uint64_t>(size);
  for_each_dtype_count(p, [&](tessera_dtype dtype, uint64_t n, size_t /*k*/) {
    TypedBuffer send(dtype, n * usize);
    for (int dst = 0; dst < size; ++dst) {
      fill_with(send, static_cast<uint64_t>(dst) * n, n, [&](uint64_t i) {
        return data_value(alltoall_source(rank, dst, size), i, kAlltoallSalt);
      });
    }
    TypedBuffer recv = sentinel_buffer(dtype, n * usize);
    const OpDesc d{"alltoall", dtype, -1, n};
    guarded(comm, d, [&] { comm.alltoall(send.view(), recv.view()); });
    for (int src = 0; src < size; ++src) {
      expect_values(
          comm, d, recv, static_cast<uint64_t>(src) * n, n,
          [&](uint64_t i) {
            return data_value(alltoall_source(src, rank, size), i, kAlltoallSalt);
          },
          "block " + std::to_string(src) + " (from rank " + std::to_string(src) + ")");
    }
  });
}

}  // namespace tessera::conformance

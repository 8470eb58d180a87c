// Every collective other than allreduce, at 1-4 ranks, with counts that do
// not divide by the rank count, count 0, and the documented in-place forms.
#include <gtest/gtest.h>

#include <atomic>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "harness.hpp"

namespace tessera::test {
namespace {

// A value that says which rank and element it came from.
int32_t code(int32_t rank, uint64_t i) { return rank * 100000 + static_cast<int32_t>(i); }

void expect_values(const std::vector<int32_t>& got, uint64_t at, uint64_t count,
                   const std::function<int32_t(uint64_t)>& want, const std::string& what) {
  for (uint64_t i = 0; i < count; ++i) {
    if (got[at + i] != want(i)) {
      std::ostringstream msg;
      msg << what << ": element " << (at + i) << " is " << got[at + i] << ", expected " << want(i);
      throw std::runtime_error(msg.str());
    }
  }
}

std::vector<int32_t> filled(uint64_t count, int32_t rank, uint64_t first = 0) {
  std::vector<int32_t> v(count);
  for (uint64_t i = 0; i < count; ++i) v[i] = code(rank, first + i);
  return v;
}

std::string label(const Comm& comm, const char* coll, uint64_t n, int32_t root = -1) {
  std::ostringstream s;
  s << coll << " n=" << n << " root=" << root << " on rank " << comm.rank() << " of "
    << comm.size();
  return s.str();
}

void broadcast_cases(Comm& comm, uint64_t n) {
  const int32_t me = comm.rank();
  for (int32_t root = 0; root < comm.size(); ++root) {
    // In place everywhere: one buffer as send and recv.
    std::vector<int32_t> data = me == root ? filled(n, root) : std::vector<int32_t>(n, -1);
    comm.run(args(TESSERA_COLL_BROADCAST, buf(data), buf(data), TESSERA_SUM, root));
    expect_values(
        data, 0, n, [&](uint64_t i) { return code(root, i); }, label(comm, "broadcast", n, root));
    // Out of place at the root; non-roots pass no send buffer.
    std::vector<int32_t> src = filled(n, root + 7);
    std::vector<int32_t> dst(n, -1);
    const tessera_buffer send = me == root ? buf(src) : raw_buf(nullptr, 0, TESSERA_I32);
    comm.run(args(TESSERA_COLL_BROADCAST, send, buf(dst), TESSERA_SUM, root));
    expect_values(
        dst, 0, n, [&](uint64_t i) { return code(root + 7, i); },
        label(comm, "broadcast out of place", n, root));
  }
}

void reduce_cases(Comm& comm, uint64_t n) {
  const int32_t me = comm.rank();
  const int32_t p = comm.size();
  const auto sum = [&](uint64_t i) {
    int32_t s = 0;
    for (int32_t r = 0; r < p; ++r) s += code(r, i);
    return s;
  };
  for (int32_t root = 0; root < p; ++root) {
    std::vector<int32_t> send = filled(n, me);
    std::vector<int32_t> recv(n, -1);
    const tessera_buffer out = me == root ? buf(recv) : raw_buf(nullptr, 0, TESSERA_I32);
    comm.run(args(TESSERA_COLL_REDUCE, buf(send), out, TESSERA_SUM, root));
    if (me == root) expect_values(recv, 0, n, sum, label(comm, "reduce", n, root));
    expect_values(
        send, 0, n, [&](uint64_t i) { return code(me, i); },
        label(comm, "reduce leaves send", n, root));
    std::vector<int32_t> inplace = filled(n, me);
    comm.run(args(TESSERA_COLL_REDUCE, buf(inplace), me == root ? buf(inplace) : buf(recv),
                  TESSERA_SUM, root));
    if (me == root) expect_values(inplace, 0, n, sum, label(comm, "reduce in place", n, root));
  }
}

void allgather_cases(Comm& comm, uint64_t n) {
  const int32_t me = comm.rank();
  const auto p = static_cast<uint64_t>(comm.size());
  std::vector<int32_t> send = filled(n, me);
  std::vector<int32_t> recv(n * p, -1);
  comm.run(args(TESSERA_COLL_ALLGATHER, buf(send), buf(recv)));
  for (uint64_t r = 0; r < p; ++r) {
    expect_values(
        recv, r * n, n, [&](uint64_t i) { return code(static_cast<int32_t>(r), i); },
        label(comm, "allgather", n));
  }
  // In place: the send block is this rank's block of recv.
  std::vector<int32_t> all(n * p, -1);
  for (uint64_t i = 0; i < n; ++i) all[static_cast<uint64_t>(me) * n + i] = code(me, i);
  comm.run(args(TESSERA_COLL_ALLGATHER,
                raw_buf(all.data() + static_cast<uint64_t>(me) * n, n, TESSERA_I32), buf(all)));
  for (uint64_t r = 0; r < p; ++r) {
    expect_values(
        all, r * n, n, [&](uint64_t i) { return code(static_cast<int32_t>(r), i); },
        label(comm, "allgather in place", n));
  }
}

void reduce_scatter_cases(Comm& comm, uint64_t n) {
  const int32_t me = comm.rank();
  const int32_t p = comm.size();
  const auto block = static_cast<uint64_t>(me) * n;
  const auto want = [&](uint64_t i) {
    int32_t s = 0;
    for (int32_t r = 0; r < p; ++r) s += code(r, block + i);
    return s;
  };
  std::vector<int32_t> send = filled(n * static_cast<uint64_t>(p), me);
  std::vector<int32_t> recv(n, -1);
  comm.run(args(TESSERA_COLL_REDUCE_SCATTER, buf(send), buf(recv)));
  expect_values(recv, 0, n, want, label(comm, "reduce_scatter", n));
  // In place: recv is this rank's block of send.
  std::vector<int32_t> inplace = send;
  comm.run(args(TESSERA_COLL_REDUCE_SCATTER, buf(inplace),
                raw_buf(inplace.data() + block, n, TESSERA_I32)));
  expect_values(inplace, block, n, want, label(comm, "reduce_scatter in place", n));
  // recv at the start of send on every rank: overlapping, staged.
  std::vector<int32_t> front = send;
  comm.run(args(TESSERA_COLL_REDUCE_SCATTER, buf(front), raw_buf(front.data(), n, TESSERA_I32)));
  expect_values(front, 0, n, want, label(comm, "reduce_scatter into front of send", n));
}

void gather_scatter_cases(Comm& comm, uint64_t n) {
  const int32_t me = comm.rank();
  const auto p = static_cast<uint64_t>(comm.size());
  const tessera_buffer none = raw_buf(nullptr, 0, TESSERA_I32);
  for (int32_t root = 0; root < comm.size(); ++root) {
    std::vector<int32_t> send = filled(n, me);
    std::vector<int32_t> recv(n * p, -1);
    comm.run(
        args(TESSERA_COLL_GATHER, buf(send), me == root ? buf(recv) : none, TESSERA_SUM, root));
    if (me == root) {
      for (uint64_t r = 0; r < p; ++r) {
        expect_values(
            recv, r * n, n, [&](uint64_t i) { return code(static_cast<int32_t>(r), i); },
            label(comm, "gather", n, root));
      }
    }
    std::vector<int32_t> parts = me == root ? filled(n * p, root) : std::vector<int32_t>();
    std::vector<int32_t> mine(n, -1);
    comm.run(
        args(TESSERA_COLL_SCATTER, me == root ? buf(parts) : none, buf(mine), TESSERA_SUM, root));
    expect_values(
        mine, 0, n, [&](uint64_t i) { return code(root, static_cast<uint64_t>(me) * n + i); },
        label(comm, "scatter", n, root));
    // In place at the root.
    if (me == root) {
      std::vector<int32_t> all(n * p, -1);
      for (uint64_t i = 0; i < n; ++i) all[static_cast<uint64_t>(root) * n + i] = code(root, i);
      comm.run(args(TESSERA_COLL_GATHER,
                    raw_buf(all.data() + static_cast<uint64_t>(root) * n, n, TESSERA_I32), buf(all),
                    TESSERA_SUM, root));
      for (uint64_t r = 0; r < p; ++r) {
        expect_values(
            all, r * n, n, [&](uint64_t i) { return code(static_cast<int32_t>(r), i); },
            label(comm, "gather in place", n, root));
      }
      comm.run(args(TESSERA_COLL_SCATTER, buf(parts),
                    raw_buf(parts.data() + static_cast<uint64_t>(root) * n, n, TESSERA_I32),
                    TESSERA_SUM, root));
      expect_values(
          parts, 0, n * p, [&](uint64_t i) { return code(root, i); },
          label(comm, "scatter in place keeps the root's data", n, root));
    } else {
      comm.run(args(TESSERA_COLL_GATHER, buf(send), none, TESSERA_SUM, root));
      comm.run(args(TESSERA_COLL_SCATTER, none, buf(mine), TESSERA_SUM, root));
    }
  }
}

void alltoall_cases(Comm& comm, uint64_t n) {
  const int32_t me = comm.rank();
  const auto p = static_cast<uint64_t>(comm.size());
  // Block j of rank r's send holds code(r, j * n + i).
  std::vector<int32_t> send = filled(n * p, me);
  std::vector<int32_t> recv(n * p, -1);
  comm.run(args(TESSERA_COLL_ALLTOALL, buf(send), buf(recv)));
  const auto check = [&](const std::vector<int32_t>& got, const char* what) {
    for (uint64_t r = 0; r < p; ++r) {
      expect_values(
          got, r * n, n,
          [&](uint64_t i) {
            return code(static_cast<int32_t>(r), static_cast<uint64_t>(me) * n + i);
          },
          label(comm, what, n));
    }
  };
  check(recv, "alltoall");
  std::vector<int32_t> inplace = send;
  comm.run(args(TESSERA_COLL_ALLTOALL, buf(inplace), buf(inplace)));
  check(inplace, "alltoall in place");
}

class CollectiveRanks : public ::testing::TestWithParam<int32_t> {};

// Cached path, then streaming path (stream_kb = 1).
TEST_P(CollectiveRanks, EveryCollectiveWithUnevenAndZeroCounts) {
  for (const int64_t stream_kb : {int64_t{0}, int64_t{1}}) {
    BackendConfig config;
    config.world_size = GetParam();
    config.stream_kb = stream_kb;
    run_ok(config, [](Comm& comm) {
      for (const uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{5}, uint64_t{1003}}) {
        broadcast_cases(comm, n);
        reduce_cases(comm, n);
        allgather_cases(comm, n);
        reduce_scatter_cases(comm, n);
        gather_scatter_cases(comm, n);
        alltoall_cases(comm, n);
      }
    });
  }
}

TEST_P(CollectiveRanks, BarrierSeparatesPhases) {
  BackendConfig config;
  config.world_size = GetParam();
  std::atomic<int32_t> arrived{0};
  run_ok(config, [&](Comm& comm) {
    const tessera_buffer none = raw_buf(nullptr, 0, TESSERA_F32);
    for (int32_t phase = 1; phase <= 20; ++phase) {
      arrived.fetch_add(1);
      comm.run(args(TESSERA_COLL_BARRIER, none, none));
      if (arrived.load() < phase * comm.size()) {
        throw std::runtime_error("a rank left the barrier before every rank reached it");
      }
      comm.run(args(TESSERA_COLL_BARRIER, none, none));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectiveRanks, ::testing::Values(1, 2, 3, 4));

// Staging copies (in-place alltoall) and buffered messages are accounted as
// TESSERA_MEM_COMM of the rank and returned when the communicator goes.
TEST(Collectives, StagingMemoryIsTrackedAndReturned) {
  FakeHost host;
  BackendConfig config;
  config.world_size = 2;
  config.stream_kb = 0;
  Backend backend(host, config);
  std::vector<int64_t> during(2, 0);
  const auto outcomes = run_ranks(backend, [&](Comm& comm) {
    std::vector<int32_t> data = filled(8, comm.rank());
    comm.run(args(TESSERA_COLL_ALLTOALL, buf(data), buf(data)));
    during[static_cast<size_t>(comm.rank())] = host.tracked(comm.rank(), TESSERA_MEM_COMM);
  });
  for (int32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].status, TESSERA_OK) << outcomes[r].message;
    EXPECT_EQ(during[r], static_cast<int64_t>(8 * sizeof(int32_t))) << "rank " << r;
    EXPECT_EQ(host.tracked(r, TESSERA_MEM_COMM), 0) << "rank " << r;
  }
}

// Large operations go through the streaming path, whose 8 KiB tile is
// accounted as communication memory of the rank while the comm lives.
TEST(Collectives, StreamingPathTileIsTracked) {
  FakeHost host;
  BackendConfig config;
  config.world_size = 2;
  config.stream_kb = 64;
  Backend backend(host, config);
  std::vector<int64_t> small(2, -1);
  std::vector<int64_t> large(2, -1);
  const auto outcomes = run_ranks(backend, [&](Comm& comm) {
    const auto r = static_cast<size_t>(comm.rank());
    std::vector<int32_t> a(1000, 1);  // 2 ranks x 2 x 4000 bytes: below 64 KiB
    comm.run(args(TESSERA_COLL_ALLREDUCE, buf(a), buf(a)));
    small[r] = host.tracked(comm.rank(), TESSERA_MEM_COMM);
    std::vector<int32_t> b(10000, 1);  // 160000 bytes: streams
    comm.run(args(TESSERA_COLL_ALLREDUCE, buf(b), buf(b)));
    large[r] = host.tracked(comm.rank(), TESSERA_MEM_COMM);
    if (a[999] != 2 || b[9999] != 2) throw std::runtime_error("wrong allreduce result");
  });
  for (int32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].status, TESSERA_OK) << outcomes[r].message;
    EXPECT_EQ(small[r], 0) << "rank " << r;
    EXPECT_EQ(large[r], 8192) << "rank " << r;
    EXPECT_EQ(host.tracked(r, TESSERA_MEM_COMM), 0) << "rank " << r;
  }
}

}  // namespace
}  // namespace tessera::test

// Data paths of the mpi backend beyond the conformance cases: element-wise
// operations split into several MPI calls (option chunk_elements), and the
// raw path (one blocking MPI call) giving the same results as post().
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "mpi_session.hpp"
#include "tessera/sdk/dtype.hpp"

namespace tessera::mpitest {
namespace {

tessera_coll_args args_of(tessera_coll_type coll, const tessera_buffer& send,
                          const tessera_buffer& recv) {
  tessera_coll_args a{};
  a.struct_size = sizeof a;
  a.coll = coll;
  a.send = send;
  a.recv = recv;
  return a;
}

template <typename T>
tessera_buffer view(std::vector<T>& v) {
  return cpu_buffer(std::span<T>(v));
}

TEST(MpiChunks, ElementwiseOperationsLargerThanAChunkAreSplit) {
  auto backend = open_mpi({"chunk_elements=1000"});
  auto comm = backend->connect(-1);
  const int p = comm->size();
  const int r = comm->rank();
  const int rank_sum = p * (p - 1) / 2;      // 0 + 1 + ... + (p - 1)
  const int64_t one_to_p = p * (p + 1) / 2;  // 1 + 2 + ... + p

  std::vector<float> f(3001);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(r + static_cast<int>(i % 7));
  comm->allreduce(std::span<float>(f));
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(f[i], static_cast<float>(rank_sum + p * static_cast<int>(i % 7))) << i;
  }

  std::vector<int64_t> avg(2500);
  for (size_t i = 0; i < avg.size(); ++i) avg[i] = (static_cast<int64_t>(i % 5) - 2) * (r + 1);
  comm->allreduce(view(avg), view(avg), TESSERA_AVG);
  for (size_t i = 0; i < avg.size(); ++i) {
    ASSERT_EQ(avg[i], (static_cast<int64_t>(i % 5) - 2) * one_to_p / p) << i;
  }

  std::vector<bfloat16> half(2100);
  for (auto& h : half) h = to_bfloat16(static_cast<float>(r + 1));
  comm->allreduce(view(half), view(half), TESSERA_SUM);
  for (const auto& h : half) ASSERT_EQ(to_float(h), static_cast<float>(one_to_p));

  std::vector<int32_t> bcast(2345, r == p - 1 ? 0 : -1);
  if (r == p - 1) {
    for (size_t i = 0; i < bcast.size(); ++i) bcast[i] = static_cast<int32_t>(3 * i + 1);
  }
  comm->broadcast(std::span<int32_t>(bcast), p - 1);
  for (size_t i = 0; i < bcast.size(); ++i) ASSERT_EQ(bcast[i], static_cast<int32_t>(3 * i + 1));

  std::vector<uint8_t> mine(2200);
  std::vector<uint8_t> most(2200, 0);
  for (size_t i = 0; i < mine.size(); ++i)
    mine[i] = static_cast<uint8_t>((i + 7 * static_cast<size_t>(r)) % 200);
  comm->reduce(view(mine), view(most), TESSERA_MAX, 0);
  if (r == 0) {
    for (size_t i = 0; i < most.size(); ++i) {
      uint8_t want = 0;
      for (int q = 0; q < p; ++q)
        want = std::max(want, static_cast<uint8_t>((i + 7 * static_cast<size_t>(q)) % 200));
      ASSERT_EQ(most[i], want) << i;
    }
  }

  if (p < 2) return;
  const int right = (r + 1) % p;
  const int left = (r + p - 1) % p;
  std::vector<double> out(2500);
  std::vector<double> in(2500, -1.0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = r * 10000.0 + static_cast<double>(i);
  Work rw = comm->irecv(view(in), left, 3);
  Work sw = comm->isend(view(out), right, 3);
  rw.wait();
  sw.wait();
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(in[i], left * 10000.0 + static_cast<double>(i));
}

// Runs `a` once through post() into the buffers `a` names, once through raw
// into `b`'s, and expects the same bytes in `got_a` and `got_b`.
void same_both_ways(Communicator& comm, const tessera_coll_args& a, const tessera_coll_args& b,
                    std::span<const std::byte> got_a, std::span<const std::byte> got_b) {
  comm.run(a);
  comm.run_raw(b);
  ASSERT_EQ(got_a.size(), got_b.size());
  EXPECT_EQ(std::memcmp(got_a.data(), got_b.data(), got_a.size()), 0)
      << "collective " << coll_name(a.coll) << " differs between post and raw";
}

TEST(MpiRaw, EveryOperationGivesTheSameResultAsPost) {
  Communicator& comm = world();
  ASSERT_TRUE(comm.has_raw());
  const int p = comm.size();
  const int r = comm.rank();
  const auto up = static_cast<size_t>(p);
  constexpr size_t n = 37;
  std::vector<int32_t> send(n * up);
  for (size_t i = 0; i < send.size(); ++i)
    send[i] = static_cast<int32_t>((i * 7 + 100 * static_cast<size_t>(r)) % 61) - 30;
  const auto bytes = [](auto& v) { return std::as_bytes(std::span(v)); };
  const auto run = [&](tessera_coll_type coll, size_t send_n, size_t recv_n, auto setup) {
    std::vector<int32_t> ra(recv_n, -7);
    std::vector<int32_t> rb(recv_n, -7);
    std::vector<int32_t> s(send.begin(), send.begin() + static_cast<std::ptrdiff_t>(send_n));
    auto a = args_of(coll, view(s), view(ra));
    auto b = args_of(coll, view(s), view(rb));
    setup(a);
    setup(b);
    same_both_ways(comm, a, b, bytes(ra), bytes(rb));
  };
  const auto none = [](tessera_coll_args&) {};
  run(TESSERA_COLL_ALLREDUCE, n, n, [](tessera_coll_args& a) { a.op = TESSERA_SUM; });
  run(TESSERA_COLL_ALLREDUCE, n, n, [](tessera_coll_args& a) { a.op = TESSERA_AVG; });
  run(TESSERA_COLL_REDUCE, n, n, [&](tessera_coll_args& a) {
    a.op = TESSERA_MAX;
    a.root = p - 1;
  });
  run(TESSERA_COLL_BROADCAST, n, n, [](tessera_coll_args& a) { a.root = 0; });
  run(TESSERA_COLL_ALLGATHER, n, n * up, none);
  run(TESSERA_COLL_REDUCE_SCATTER, n * up, n, [](tessera_coll_args& a) { a.op = TESSERA_MIN; });
  run(TESSERA_COLL_GATHER, n, n * up, [&](tessera_coll_args& a) { a.root = p / 2; });
  run(TESSERA_COLL_SCATTER, n * up, n, [&](tessera_coll_args& a) { a.root = p / 2; });
  run(TESSERA_COLL_ALLTOALL, n * up, n * up, none);
  std::vector<int32_t> nothing;
  comm.run_raw(args_of(TESSERA_COLL_BARRIER, view(nothing), view(nothing)));

  if (p < 2) return;
  // A ring that cannot deadlock even if a blocking send waits for its
  // receiver: rank 0 sends first, every other rank receives first.
  std::vector<int32_t> got(n, -1);
  auto s = args_of(TESSERA_COLL_SEND, view(send), view(nothing));
  s.send.count = n;
  s.peer = (r + 1) % p;
  auto v = args_of(TESSERA_COLL_RECV, view(nothing), view(got));
  v.peer = (r + p - 1) % p;
  const int left = v.peer;
  if (r == 0) {
    comm.run_raw(s);
    comm.run_raw(v);
  } else {
    comm.run_raw(v);
    comm.run_raw(s);
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], static_cast<int32_t>((i * 7 + 100 * static_cast<size_t>(left)) % 61) - 30)
        << i;
  }
}

}  // namespace
}  // namespace tessera::mpitest

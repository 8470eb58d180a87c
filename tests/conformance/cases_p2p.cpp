// Point to point: a non-blocking ring exchange, ordered blocking exchanges
// between pairs of ranks, and several tags in flight at once. Every message's
// payload names its sender and its place in the sequence, so a message
// matched to the wrong receive is reported.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "case_util.hpp"
#include "cases.hpp"
#include "check.hpp"

namespace tessera::conformance {
namespace {

constexpr int kRingSalt = 40;
constexpr int kOrderedSalt = 50;
constexpr int kTagSalt = 60;

int right_of(const Communicator& comm) { return (comm.rank() + 1) % comm.size(); }
int left_of(const Communicator& comm) { return (comm.rank() + comm.size() - 1) % comm.size(); }

// A receive posted with irecv, checked after it completes.
struct PostedRecv {
  TypedBuffer buf;
  OpDesc desc;
  int source;  // data_value source id expected in the payload
  int salt;
  Work work;
};

void expect_message(const Communicator& comm, const PostedRecv& r) {
  expect_values(comm, r.desc, r.buf, 0, r.buf.count(),
                [&](uint64_t i) { return data_value(r.source, i, r.salt); });
}

}  // namespace

void send_recv_ring(Communicator& comm, const CaseParams& p) {
  const int right = right_of(comm);
  const int left = left_of(comm);
  for_each_dtype_count(p, [&](tessera_dtype dtype, uint64_t n, size_t /*k*/) {
    TypedBuffer out = data_buffer(dtype, n, comm.rank(), kRingSalt);
    TypedBuffer in = sentinel_buffer(dtype, n);
    const OpDesc rd{"irecv(ring)", dtype, -1, n, -1, left, 0};
    const OpDesc sd{"isend(ring)", dtype, -1, n, -1, right, 0};
    Work recv_work;
    Work send_work;
    guarded(comm, rd, [&] { recv_work = comm.irecv(in.view(), left, 0); });
    guarded(comm, sd, [&] { send_work = comm.isend(out.view(), right, 0); });
    guarded(comm, rd, [&] { recv_work.wait(); });
    guarded(comm, sd, [&] { send_work.wait(); });
    expect_values(comm, rd, in, 0, n, [&](uint64_t i) { return data_value(left, i, kRingSalt); });
    expect_values(
        comm, sd, out, 0, n, [&](uint64_t i) { return data_value(comm.rank(), i, kRingSalt); },
        "send buffer modified");
  });
}

void send_recv_ordered(Communicator& comm, const CaseParams& /*p*/) {
  // Pairs (0,1), (2,3), ...; with an odd group size the last rank sits out.
  const int rank = comm.rank();
  const int partner = rank % 2 == 0 ? rank + 1 : rank - 1;
  if (partner >= comm.size()) return;
  constexpr int kTag = 4;
  // Three messages with the same tag, one of them empty, then a reply the
  // other way: receives must match sends in the order they were issued.
  constexpr std::array<uint64_t, 3> kCounts{7, 0, 13};
  constexpr std::array<tessera_dtype, 4> kDtypes{TESSERA_F32, TESSERA_BF16, TESSERA_I64,
                                                 TESSERA_U8};
  for (const auto dtype : kDtypes) {
    if (rank % 2 == 0) {
      for (size_t k = 0; k < kCounts.size(); ++k) {
        TypedBuffer out = data_buffer(dtype, kCounts[k], rank, kOrderedSalt + static_cast<int>(k));
        const OpDesc d{
            "send(ordered #" + std::to_string(k) + ")", dtype, -1, kCounts[k], -1, partner, kTag};
        guarded(comm, d, [&] { comm.send(out.view(), partner, kTag); });
      }
      TypedBuffer reply = sentinel_buffer(dtype, 3);
      const OpDesc d{"recv(reply)", dtype, -1, 3, -1, partner, kTag};
      guarded(comm, d, [&] { comm.recv(reply.view(), partner, kTag); });
      expect_values(comm, d, reply, 0, 3,
                    [&](uint64_t i) { return data_value(partner, i, kOrderedSalt + 9); });
    } else {
      for (size_t k = 0; k < kCounts.size(); ++k) {
        TypedBuffer in = sentinel_buffer(dtype, kCounts[k]);
        const OpDesc d{
            "recv(ordered #" + std::to_string(k) + ")", dtype, -1, kCounts[k], -1, partner, kTag};
        guarded(comm, d, [&] { comm.recv(in.view(), partner, kTag); });
        expect_values(comm, d, in, 0, kCounts[k], [&](uint64_t i) {
          return data_value(partner, i, kOrderedSalt + static_cast<int>(k));
        });
      }
      TypedBuffer reply = data_buffer(dtype, 3, rank, kOrderedSalt + 9);
      const OpDesc d{"send(reply)", dtype, -1, 3, -1, partner, kTag};
      guarded(comm, d, [&] { comm.send(reply.view(), partner, kTag); });
    }
  }
}

void send_recv_tags(Communicator& comm, const CaseParams& /*p*/) {
  const int rank = comm.rank();
  const int right = right_of(comm);
  const int left = left_of(comm);
  const tessera_dtype dtype = TESSERA_I32;
  // Tag t carries 1 + 5t elements, so a message matched to the wrong tag also
  // has the wrong size. Tag 7 is used twice (order within a tag); tag 3 is
  // also sent the other way round the ring (matching by peer).
  const auto count_of = [](int tag) { return static_cast<uint64_t>(1 + 5 * (tag % 4)); };
  struct Outgoing {
    int peer;
    int tag;
    int salt;
  };
  const std::vector<Outgoing> outgoing{{right, 3, kTagSalt + 3}, {right, 1, kTagSalt + 1},
                                       {right, 0, kTagSalt + 0}, {right, 2, kTagSalt + 2},
                                       {right, 7, kTagSalt + 7}, {right, 7, kTagSalt + 8},
                                       {left, 3, kTagSalt + 9}};
  // Receives posted in a different order than the sends.
  const std::vector<Outgoing> incoming{{left, 0, kTagSalt + 0},  {left, 1, kTagSalt + 1},
                                       {left, 2, kTagSalt + 2},  {left, 3, kTagSalt + 3},
                                       {right, 3, kTagSalt + 9}, {left, 7, kTagSalt + 7},
                                       {left, 7, kTagSalt + 8}};

  std::vector<std::unique_ptr<PostedRecv>> recvs;
  for (const auto& in : incoming) {
    const uint64_t n = count_of(in.tag);
    auto r = std::make_unique<PostedRecv>(PostedRecv{
        sentinel_buffer(dtype, n), OpDesc{"irecv(tags)", dtype, -1, n, -1, in.peer, in.tag},
        in.peer, in.salt, Work{}});
    guarded(comm, r->desc, [&] { r->work = comm.irecv(r->buf.view(), in.peer, in.tag); });
    recvs.push_back(std::move(r));
  }
  std::vector<TypedBuffer> out_bufs;
  std::vector<Work> sends;
  out_bufs.reserve(outgoing.size());
  for (const auto& out : outgoing) {
    const uint64_t n = count_of(out.tag);
    out_bufs.push_back(data_buffer(dtype, n, rank, out.salt));
    const OpDesc d{"isend(tags)", dtype, -1, n, -1, out.peer, out.tag};
    guarded(comm, d,
            [&] { sends.push_back(comm.isend(out_bufs.back().view(), out.peer, out.tag)); });
  }
  // Wait for the receives last to first, then for the sends.
  for (auto it = recvs.rbegin(); it != recvs.rend(); ++it) {
    PostedRecv& r = **it;
    guarded(comm, r.desc, [&] { r.work.wait(); });
    expect_message(comm, r);
  }
  for (size_t k = 0; k < sends.size(); ++k) {
    const OpDesc d{"isend(tags)",    dtype,          -1, count_of(outgoing[k].tag), -1,
                   outgoing[k].peer, outgoing[k].tag};
    guarded(comm, d, [&] { sends[k].wait(); });
  }
}

}  // namespace tessera::conformance

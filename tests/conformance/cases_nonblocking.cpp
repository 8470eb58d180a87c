// Barrier semantics, non-blocking collectives completed in order, out of order
// and by polling, and ordering between blocking and non-blocking operations
// on one communicator.
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "case_util.hpp"
#include "cases.hpp"
#include "check.hpp"

namespace tessera::conformance {
namespace {

// A started operation with its buffers and the check of its result.
struct Pending {
  OpDesc desc;
  TypedBuffer send;
  TypedBuffer recv;
  Work work;
  std::function<void(const Communicator&, const Pending&)> check;
};

using PendingList = std::vector<std::unique_ptr<Pending>>;

void check_reduction(const Communicator& comm, const Pending& op, const TypedBuffer& result,
                     uint64_t first_index) {
  const auto rop = static_cast<tessera_reduce_op>(op.desc.op);
  expect_values(comm, op.desc, result, 0, result.count(), [&](uint64_t i) {
    return reduction_expected(rop, result.dtype(), comm.size(), first_index + i);
  });
}

// Starts an allreduce (in place when `in_place`), checked against the
// reference.
std::unique_ptr<Pending> start_allreduce(Communicator& comm, tessera_dtype dtype,
                                         tessera_reduce_op op, uint64_t n, bool in_place) {
  auto pending = std::make_unique<Pending>(
      Pending{OpDesc{in_place ? "iallreduce(in-place)" : "iallreduce", dtype, op, n},
              reduction_buffer(op, dtype, comm.size(), comm.rank(), n),
              in_place ? TypedBuffer(dtype, 0) : sentinel_buffer(dtype, n), Work{}, nullptr});
  Pending& p = *pending;
  TypedBuffer& result = in_place ? p.send : p.recv;
  p.check = [in_place](const Communicator& c, const Pending& self) {
    check_reduction(c, self, in_place ? self.send : self.recv, 0);
  };
  guarded(comm, p.desc, [&] { p.work = comm.iallreduce(p.send.view(), result.view(), op); });
  return pending;
}

std::unique_ptr<Pending> start_allgather(Communicator& comm, tessera_dtype dtype, uint64_t n,
                                         int salt) {
  const auto total = n * static_cast<uint64_t>(comm.size());
  auto pending = std::make_unique<Pending>(Pending{OpDesc{"iallgather", dtype, -1, n},
                                                   data_buffer(dtype, n, comm.rank(), salt),
                                                   sentinel_buffer(dtype, total), Work{}, nullptr});
  Pending& p = *pending;
  p.check = [salt, n](const Communicator& c, const Pending& self) {
    for (int src = 0; src < c.size(); ++src) {
      expect_values(
          c, self.desc, self.recv, static_cast<uint64_t>(src) * n, n,
          [&](uint64_t i) { return data_value(src, i, salt); },
          "block " + std::to_string(src) + " (from rank " + std::to_string(src) + ")");
    }
  };
  guarded(comm, p.desc, [&] { p.work = comm.iallgather(p.send.view(), p.recv.view()); });
  return pending;
}

std::unique_ptr<Pending> start_reduce_scatter(Communicator& comm, tessera_dtype dtype,
                                              tessera_reduce_op op, uint64_t n) {
  const auto total = n * static_cast<uint64_t>(comm.size());
  auto pending = std::make_unique<Pending>(
      Pending{OpDesc{"ireduce_scatter", dtype, op, n},
              reduction_buffer(op, dtype, comm.size(), comm.rank(), total),
              sentinel_buffer(dtype, n), Work{}, nullptr});
  Pending& p = *pending;
  p.check = [n](const Communicator& c, const Pending& self) {
    check_reduction(c, self, self.recv, static_cast<uint64_t>(c.rank()) * n);
  };
  guarded(comm, p.desc, [&] { p.work = comm.ireduce_scatter(p.send.view(), p.recv.view(), op); });
  return pending;
}

std::unique_ptr<Pending> start_broadcast(Communicator& comm, tessera_dtype dtype, uint64_t n,
                                         int root, int salt) {
  auto pending = std::make_unique<Pending>(
      Pending{OpDesc{"ibroadcast", dtype, -1, n, root},
              comm.rank() == root ? data_buffer(dtype, n, root, salt) : sentinel_buffer(dtype, n),
              TypedBuffer(dtype, 0), Work{}, nullptr});
  Pending& p = *pending;
  p.check = [root, salt](const Communicator& c, const Pending& self) {
    expect_values(c, self.desc, self.send, 0, self.send.count(),
                  [&](uint64_t i) { return data_value(root, i, salt); });
  };
  guarded(comm, p.desc, [&] { p.work = comm.ibroadcast(p.send.view(), root); });
  return pending;
}

// A batch of different non-blocking operations, posted in this order by every
// rank.
PendingList start_batch(Communicator& comm, int salt) {
  PendingList ops;
  ops.push_back(start_allreduce(comm, TESSERA_F32, TESSERA_SUM, 13, false));
  ops.push_back(start_allgather(comm, TESSERA_BF16, 7, salt));
  ops.push_back(start_allreduce(comm, TESSERA_I64, TESSERA_MAX, 3001, true));
  ops.push_back(start_reduce_scatter(comm, TESSERA_I32, TESSERA_SUM, 3));
  ops.push_back(start_broadcast(comm, TESSERA_F64, 13, comm.size() - 1, salt + 1));
  ops.push_back(start_allreduce(comm, TESSERA_F16, TESSERA_AVG, 2, false));
  ops.push_back(start_allgather(comm, TESSERA_U8, 0, salt + 2));
  ops.push_back(start_allreduce(comm, TESSERA_U8, TESSERA_PROD, 1, true));
  return ops;
}

void wait_and_check(const Communicator& comm, Pending& op) {
  guarded(comm, op.desc, [&] { op.work.wait(); });
  op.check(comm, op);
}

}  // namespace

void barrier(Communicator& comm, const CaseParams& /*p*/) {
  for (int k = 0; k < 10; ++k) {
    guarded(comm, OpDesc{"barrier #" + std::to_string(k)}, [&] { comm.barrier(); });
  }
  const int size = comm.size();
  if (size < 2) return;
  // Rank 0 starts a barrier on a duplicate of the world while the last rank
  // is held back, waiting for a message from rank 0 on the world. The
  // barrier cannot complete before that message is sent.
  const int last = size - 1;
  std::unique_ptr<Communicator> dup;
  guarded(comm, OpDesc{"split(duplicate)"}, [&] { dup = comm.split(0, comm.rank()); });
  TypedBuffer token = data_buffer(TESSERA_U8, 1, 0, 70);
  const OpDesc token_desc{"send/recv(token)", TESSERA_U8, -1, 1, -1, -1, 9};
  const OpDesc bd{"barrier(held back)"};
  if (comm.rank() == 0) {
    Work w;
    guarded(comm, bd, [&] {
      w = dup->start(
          make_args(TESSERA_COLL_BARRIER, empty_buffer(TESSERA_U8), empty_buffer(TESSERA_U8)));
    });
    bool done = false;
    guarded(comm, bd, [&] { done = w.test(); });
    if (done) {
      fail(comm, bd, "barrier completed before rank " + std::to_string(last) + " entered it");
    }
    guarded(comm, token_desc, [&] { comm.send(token.view(), last, 9); });
    guarded(comm, bd, [&] { w.wait(); });
  } else if (comm.rank() == last) {
    guarded(comm, token_desc, [&] { comm.recv(token.view(), 0, 9); });
    guarded(comm, bd, [&] { dup->barrier(); });
  } else {
    guarded(comm, bd, [&] { dup->barrier(); });
  }
}

void nonblocking(Communicator& comm, const CaseParams& p) {
  // Waited in the order posted.
  PendingList ops = start_batch(comm, 80);
  for (auto& op : ops) wait_and_check(comm, *op);

  // Waited last to first.
  ops = start_batch(comm, 83);
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) wait_and_check(comm, **it);

  // Waited in a shuffled order: odd positions first, then even ones.
  ops = start_batch(comm, 86);
  for (size_t k = 1; k < ops.size(); k += 2) wait_and_check(comm, *ops[k]);
  for (size_t k = 0; k < ops.size(); k += 2) wait_and_check(comm, *ops[k]);

  // Completed by polling test() round-robin until every operation is done.
  ops = start_batch(comm, 89);
  std::vector<bool> done(ops.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + p.poll_limit;
  while (std::count(done.begin(), done.end(), false) > 0) {
    for (size_t k = 0; k < ops.size(); ++k) {
      if (done[k]) continue;
      bool finished = false;
      guarded(comm, ops[k]->desc, [&] { finished = ops[k]->work.test(); });
      if (finished) {
        done[k] = true;
        if (ops[k]->work.pending()) fail(comm, ops[k]->desc, "work still pending after test()");
        ops[k]->check(comm, *ops[k]);
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      fail(comm, "polling test()",
           "operations still not done after " + std::to_string(p.poll_limit.count()) + " ms");
    }
    std::this_thread::yield();
  }
}

void blocking_after_nonblocking(Communicator& comm, const CaseParams& /*p*/) {
  const int size = comm.size();
  // A non-blocking allreduce stays pending while blocking collectives run;
  // every rank matches operations by posting order, so each result must be
  // its own (the operations differ in dtype, op and count).
  auto first = start_allreduce(comm, TESSERA_I32, TESSERA_SUM, 13, false);
  auto second = start_broadcast(comm, TESSERA_I64, 7, 0, 90);
  TypedBuffer max_buf = reduction_buffer(TESSERA_MAX, TESSERA_F64, size, comm.rank(), 7);
  const OpDesc max_desc{"allreduce(blocking, after non-blocking)", TESSERA_F64, TESSERA_MAX, 7};
  guarded(comm, max_desc, [&] { comm.allreduce(max_buf.view(), max_buf.view(), TESSERA_MAX); });
  TypedBuffer bcast = comm.rank() == size - 1 ? data_buffer(TESSERA_F32, 3, size - 1, 91)
                                              : sentinel_buffer(TESSERA_F32, 3);
  const OpDesc bcast_desc{"broadcast(blocking, after non-blocking)", TESSERA_F32, -1, 3, size - 1};
  guarded(comm, bcast_desc, [&] { comm.broadcast(bcast.view(), size - 1); });
  wait_and_check(comm, *second);
  wait_and_check(comm, *first);
  expect_values(comm, max_desc, max_buf, 0, 7,
                [&](uint64_t i) { return reduction_expected(TESSERA_MAX, TESSERA_F64, size, i); });
  expect_values(comm, bcast_desc, bcast, 0, 3,
                [&](uint64_t i) { return data_value(size - 1, i, 91); });

  if (size < 2) return;
  // Point to point: a non-blocking send followed by a blocking send with the
  // same tag arrive in that order. Both receives are posted first, so a
  // backend whose blocking send waits for the receiver cannot deadlock.
  const int right = (comm.rank() + 1) % size;
  const int left = (comm.rank() + size - 1) % size;
  TypedBuffer in1 = sentinel_buffer(TESSERA_I64, 5);
  TypedBuffer in2 = sentinel_buffer(TESSERA_I64, 5);
  TypedBuffer out1 = data_buffer(TESSERA_I64, 5, comm.rank(), 92);
  TypedBuffer out2 = data_buffer(TESSERA_I64, 5, comm.rank(), 93);
  const OpDesc rd{"irecv(order)", TESSERA_I64, -1, 5, -1, left, 0};
  const OpDesc sd{"isend+send(order)", TESSERA_I64, -1, 5, -1, right, 0};
  Work r1;
  Work r2;
  Work s1;
  guarded(comm, rd, [&] {
    r1 = comm.irecv(in1.view(), left, 0);
    r2 = comm.irecv(in2.view(), left, 0);
  });
  guarded(comm, sd, [&] {
    s1 = comm.isend(out1.view(), right, 0);
    comm.send(out2.view(), right, 0);
    s1.wait();
  });
  guarded(comm, rd, [&] {
    r2.wait();
    r1.wait();
  });
  expect_values(
      comm, rd, in1, 0, 5, [&](uint64_t i) { return data_value(left, i, 92); }, "first message");
  expect_values(
      comm, rd, in2, 0, 5, [&](uint64_t i) { return data_value(left, i, 93); }, "second message");
}

}  // namespace tessera::conformance

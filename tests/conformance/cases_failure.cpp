// Failure paths: invalid arguments are rejected with an error naming the
// problem and leave the communicator usable; an operation a rank never joins
// times out with an error naming that rank; a wait with a timeout leaves the
// work running; an abort fails pending and later operations of the group,
// carrying the reason, and leaves the parent group usable.
#include <chrono>
#include <memory>
#include <string>

#include "case_util.hpp"
#include "cases.hpp"
#include "check.hpp"

namespace tessera::conformance {
namespace {

// A working allreduce on `comm`, after a failure path was exercised.
void verify_usable(Communicator& comm, const std::string& when) {
  const int size = comm.size();
  TypedBuffer buf = reduction_buffer(TESSERA_SUM, TESSERA_I64, size, comm.rank(), 7);
  const OpDesc d{"allreduce " + when, TESSERA_I64, TESSERA_SUM, 7};
  guarded(comm, d, [&] { comm.allreduce(buf.view(), buf.view(), TESSERA_SUM); });
  expect_values(comm, d, buf, 0, 7,
                [&](uint64_t i) { return reduction_expected(TESSERA_SUM, TESSERA_I64, size, i); });
}

std::unique_ptr<Communicator> duplicate(Communicator& comm, const std::string& what) {
  std::unique_ptr<Communicator> dup;
  guarded(comm, OpDesc{what}, [&] { dup = comm.split(0, comm.rank()); });
  if (!dup) fail(comm, what, "split with color 0 returned no communicator");
  return dup;
}

}  // namespace

void invalid_arguments(Communicator& comm, const CaseParams& /*p*/) {
  const int size = comm.size();
  const int rank = comm.rank();
  const auto usize = static_cast<uint64_t>(size);
  constexpr uint64_t n = 4;
  constexpr tessera_status kInvalid = TESSERA_ERR_INVALID_ARGUMENT;
  TypedBuffer a = reduction_buffer(TESSERA_SUM, TESSERA_F32, size, rank, n);
  TypedBuffer b(TESSERA_F32, n);
  TypedBuffer wide(TESSERA_F32, n * usize + 1);
  TypedBuffer other_dtype(TESSERA_F64, n);

  // Every rank makes the same invalid calls, each detectable locally.
  expect_error(comm, OpDesc{"allgather with recv count n*P+1", TESSERA_F32, -1, n}, {kInvalid},
               {"count"}, [&] { comm.allgather(a.view(), wide.view()); });
  expect_error(comm, OpDesc{"allreduce with recv count != send count", TESSERA_F32, TESSERA_SUM, n},
               {kInvalid}, {"count"},
               [&] { comm.allreduce(a.view(), wide.view(0, n + 1), TESSERA_SUM); });
  expect_error(comm, OpDesc{"reduce_scatter with send count n*P+1", TESSERA_F32, TESSERA_SUM, n},
               {kInvalid}, {"count"},
               [&] { comm.reduce_scatter(wide.view(), b.view(), TESSERA_SUM); });
  expect_error(comm, OpDesc{"alltoall with recv count n*P+1", TESSERA_F32, -1, n}, {kInvalid},
               {"count"}, [&] { comm.alltoall(wide.view(0, n * usize), wide.view()); });
  expect_error(comm, OpDesc{"broadcast with root = size", TESSERA_F32, -1, n, size}, {kInvalid},
               {"root"}, [&] { comm.broadcast(b.view(), size); });
  expect_error(comm, OpDesc{"broadcast with root -1", TESSERA_F32, -1, n}, {kInvalid}, {"root"},
               [&] { comm.broadcast(b.view(), -1); });
  expect_error(comm, OpDesc{"reduce with root = size", TESSERA_F32, TESSERA_SUM, n, size},
               {kInvalid}, {"root"}, [&] { comm.reduce(a.view(), b.view(), TESSERA_SUM, size); });
  expect_error(comm, OpDesc{"gather with root = size", TESSERA_F32, -1, n, size}, {kInvalid},
               {"root"}, [&] { comm.gather(a.view(), wide.view(0, n * usize), size); });
  expect_error(comm, OpDesc{"scatter with root = size", TESSERA_F32, -1, n, size}, {kInvalid},
               {"root"}, [&] { comm.scatter(wide.view(0, n * usize), b.view(), size); });
  expect_error(comm, OpDesc{"send to self", TESSERA_F32, -1, n, -1, rank, 0}, {kInvalid},
               {"self", "itself", "own rank", "peer"}, [&] { comm.send(a.view(), rank, 0); });
  expect_error(comm, OpDesc{"irecv from self", TESSERA_F32, -1, n, -1, rank, 0}, {kInvalid},
               {"self", "itself", "own rank", "peer"},
               [&] { Work w = comm.irecv(b.view(), rank, 0); });
  expect_error(comm, OpDesc{"send to peer = size", TESSERA_F32, -1, n, -1, size, 0}, {kInvalid},
               {"peer"}, [&] { comm.send(a.view(), size, 0); });
  expect_error(comm, OpDesc{"recv from peer -1", TESSERA_F32, -1, n}, {kInvalid}, {"peer"},
               [&] { comm.recv(b.view(), -1, 0); });
  const int some_peer = (rank + 1) % size;
  if (some_peer != rank) {
    expect_error(comm, OpDesc{"isend with tag -1", TESSERA_F32, -1, n, -1, some_peer}, {kInvalid},
                 {"tag"}, [&] { Work w = comm.isend(a.view(), some_peer, -1); });
  }
  expect_error(comm, OpDesc{"allreduce with f32 send and f64 recv", TESSERA_F32, TESSERA_SUM, n},
               {kInvalid}, {"dtype"},
               [&] { comm.allreduce(a.view(), other_dtype.view(), TESSERA_SUM); });
  expect_error(comm, OpDesc{"allreduce with reduce op 99", TESSERA_F32, -1, n}, {kInvalid}, {"op"},
               [&] { comm.allreduce(a.view(), b.view(), 99); });
  tessera_buffer bad_dtype = a.view();
  bad_dtype.dtype = 42;
  expect_error(comm, OpDesc{"allreduce with dtype 42", TESSERA_F32, TESSERA_SUM, n}, {kInvalid},
               {"dtype"}, [&] { comm.allreduce(bad_dtype, bad_dtype, TESSERA_SUM); });
  tessera_buffer null_data = a.view();
  null_data.data = nullptr;
  expect_error(comm, OpDesc{"allreduce with null data and count 4", TESSERA_F32, TESSERA_SUM, n},
               {kInvalid}, {"null"}, [&] { comm.allreduce(null_data, b.view(), TESSERA_SUM); });

  verify_usable(comm, "after the rejected calls");
}

void timeout(Communicator& comm, const CaseParams& p) {
  const int size = comm.size();
  const int rank = comm.rank();
  const int missing = size - 1;
  if (size < 2) fail(comm, "timeout", "needs at least two ranks");

  // Every rank but the last calls an allreduce with a short timeout on a
  // duplicate of the world; the last never does. Each waiting rank gets an
  // error saying it timed out and naming the missing rank: status timeout,
  // or peer lost where another rank's timeout already broke the group. The
  // world stays healthy and holds the last rank back until the others have
  // timed out.
  {
    auto dup = duplicate(comm, "split(duplicate for timeout)");
    if (rank != missing) {
      TypedBuffer buf = reduction_buffer(TESSERA_SUM, TESSERA_F32, size, rank, 5);
      auto args = make_args(TESSERA_COLL_ALLREDUCE, buf.view(), buf.view());
      args.op = TESSERA_SUM;
      args.timeout_ms = p.short_timeout.count();
      const OpDesc d{"allreduce with timeout_ms=" + std::to_string(args.timeout_ms) +
                         " while rank " + std::to_string(missing) + " never joins",
                     TESSERA_F32, TESSERA_SUM, 5};
      const std::string message =
          expect_error(*dup, d, {TESSERA_ERR_TIMEOUT, TESSERA_ERR_PEER_LOST}, {"timed out"},
                       [&] { dup->run(args); });
      if (!names_rank(message, missing)) {
        fail(*dup, d,
             "the timeout error does not name the missing rank " + std::to_string(missing) + ": " +
                 message);
      }
    }
    guarded(comm, OpDesc{"barrier after the timeout"}, [&] { comm.barrier(); });
  }

  // Waiting on work with a timeout gives up waiting but leaves the work
  // running: here the last rank joins only after the others' wait expired.
  auto dup = duplicate(comm, "split(duplicate for wait timeout)");
  TypedBuffer buf = reduction_buffer(TESSERA_SUM, TESSERA_I32, size, rank, 13);
  const OpDesc d{"iallreduce waited with a 50 ms limit", TESSERA_I32, TESSERA_SUM, 13};
  if (rank != missing) {
    Work w;
    guarded(*dup, d, [&] { w = dup->iallreduce(buf.view(), buf.view(), TESSERA_SUM); });
    expect_error(*dup, d, {TESSERA_ERR_TIMEOUT}, {},
                 [&] { w.wait(std::chrono::milliseconds(50)); });
    if (!w.pending()) fail(*dup, d, "the work was released although it had not finished");
    guarded(comm, OpDesc{"barrier releasing the late rank"}, [&] { comm.barrier(); });
    guarded(*dup, d, [&] { w.wait(); });
  } else {
    guarded(comm, OpDesc{"barrier releasing the late rank"}, [&] { comm.barrier(); });
    guarded(*dup, d, [&] { dup->allreduce(buf.view(), buf.view(), TESSERA_SUM); });
  }
  expect_values(*dup, d, buf, 0, 13,
                [&](uint64_t i) { return reduction_expected(TESSERA_SUM, TESSERA_I32, size, i); });
  verify_usable(*dup, "on the group after a wait timeout");
  dup.reset();
  verify_usable(comm, "on the parent after the timeouts");
}

void abort_propagation(Communicator& comm, const CaseParams& /*p*/) {
  const int size = comm.size();
  const int rank = comm.rank();
  const int aborter = size - 1;
  const std::string reason =
      "conformance: rank " + std::to_string(aborter) + " aborts the group on purpose";
  auto dup = duplicate(comm, "split(duplicate for abort)");
  TypedBuffer buf = reduction_buffer(TESSERA_SUM, TESSERA_F64, size, rank, 9);
  if (rank != aborter) {
    // Pending when the abort happens: the aborter never joins it, and aborts
    // only after everyone passed the world barrier, i.e. after it was posted.
    const OpDesc d{"iallreduce pending during the abort", TESSERA_F64, TESSERA_SUM, 9};
    Work w;
    guarded(*dup, d, [&] { w = dup->iallreduce(buf.view(), buf.view(), TESSERA_SUM); });
    guarded(comm, OpDesc{"barrier before the abort"}, [&] { comm.barrier(); });
    expect_error(*dup, d, {TESSERA_ERR_PEER_LOST}, {reason}, [&] { w.wait(); });
  } else {
    guarded(comm, OpDesc{"barrier before the abort"}, [&] { comm.barrier(); });
    dup->abort(reason);
  }
  // Operations issued after the abort fail too, on every rank, the aborting
  // one included.
  const OpDesc later{"allreduce after the abort", TESSERA_F64, TESSERA_SUM, 9};
  expect_error(*dup, later, {TESSERA_ERR_PEER_LOST}, {reason},
               [&] { dup->allreduce(buf.view(), buf.view(), TESSERA_SUM); });
  dup.reset();
  verify_usable(comm, "on the parent after a sub-group was aborted");
  guarded(comm, OpDesc{"barrier after the abort"}, [&] { comm.barrier(); });
}

}  // namespace tessera::conformance

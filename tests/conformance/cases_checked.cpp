// The host's checked layer over every backend: ranks posting different
// collectives get an error naming both calls, on every rank, before the
// backend sees them (so nothing is corrupted and the group stays usable);
// the flight recorder lists what was posted.
#include <memory>
#include <string>

#include "case_util.hpp"
#include "cases.hpp"
#include "check.hpp"

namespace tessera::conformance {
namespace {

// Expects `fn` to fail on every rank with MISMATCH and exactly `expected`
// in its message.
template <typename F>
void expect_mismatch(Communicator& comm, const std::string& what, const std::string& expected,
                     F&& fn) {
  const std::string message =
      expect_error(comm, OpDesc{what}, {TESSERA_ERR_MISMATCH}, {"collective mismatch"}, fn);
  if (message.find(expected) == std::string::npos) {
    fail(comm, OpDesc{what}, "the message '" + message + "' does not say '" + expected + "'");
  }
}

void expect_in(Communicator& comm, const std::string& text, const std::string& part) {
  if (text.find(part) == std::string::npos) {
    fail(comm, OpDesc{"flight recorder"}, "'" + part + "' is not in:\n" + text);
  }
}

}  // namespace

void collective_mismatch(Communicator& comm, const CaseParams& /*p*/) {
  const int rank = comm.rank();
  const int size = comm.size();
  const auto usize = static_cast<uint64_t>(size);
  std::unique_ptr<Communicator> checked;
  guarded(comm, OpDesc{"split_checked"},
          [&] { checked = comm.split_checked(0, rank, CollectiveChecks::verify, "checked"); });
  Communicator& c = *checked;

  // #1: another operation.
  TypedBuffer big(TESSERA_F32, 4096);
  TypedBuffer gathered(TESSERA_F32, 1024 * usize);
  expect_mismatch(c, "allreduce against allgather",
                  "rank 1 posted allgather(f32, 1024) as its collective #1 while rank 0 posted "
                  "allreduce(f32, 4096, sum)",
                  [&] {
                    if (rank == 1) {
                      c.allgather(big.view(0, 1024), gathered.view());
                    } else {
                      c.allreduce(big.view(), big.view(), TESSERA_SUM);
                    }
                  });
  // #2: another count, posted non-blocking.
  TypedBuffer wider(TESSERA_F32, 4097);
  const int last = size - 1;
  expect_mismatch(c, "iallreduce with another count",
                  "rank " + std::to_string(last) +
                      " posted allreduce(f32, 4097, sum) as its collective #2 while rank 0 posted "
                      "allreduce(f32, 4096, sum)",
                  [&] {
                    Work w = rank == last ? c.iallreduce(wider.view(), wider.view(), TESSERA_SUM)
                                          : c.iallreduce(big.view(), big.view(), TESSERA_SUM);
                    w.wait();
                  });
  // #3: another root.
  TypedBuffer small(TESSERA_F32, 16);
  expect_mismatch(c, "broadcast from another root",
                  "rank 1 posted broadcast(f32, 16, root 1) as its collective #3 while rank 0 "
                  "posted broadcast(f32, 16, root 0)",
                  [&] { c.broadcast(small.view(), rank == 1 ? 1 : 0); });
  // #4: another dtype and reduction.
  TypedBuffer f64(TESSERA_F64, 16);
  expect_mismatch(c, "allreduce of another dtype",
                  "rank 1 posted allreduce(f64, 16, max) as its collective #4 while rank 0 "
                  "posted allreduce(f32, 16, sum)",
                  [&] {
                    if (rank == 1) {
                      c.allreduce(f64.view(), f64.view(), TESSERA_MAX);
                    } else {
                      c.allreduce(small.view(), small.view(), TESSERA_SUM);
                    }
                  });

  // #5: nothing reached the backend, so the group still works.
  TypedBuffer buf = reduction_buffer(TESSERA_SUM, TESSERA_I64, size, rank, 7);
  const OpDesc d{"allreduce after the mismatches", TESSERA_I64, TESSERA_SUM, 7};
  guarded(c, d, [&] { c.allreduce(buf.view(), buf.view(), TESSERA_SUM); });
  expect_values(c, d, buf, 0, 7,
                [&](uint64_t i) { return reduction_expected(TESSERA_SUM, TESSERA_I64, size, i); });

  const std::string recorder = c.flight_recorder();
  expect_in(c, recorder,
            "flight recorder of rank " + std::to_string(rank) + " of " + std::to_string(size) +
                " on communicator 'checked'");
  expect_in(c, recorder, "the last 5 of 5 operations");
  expect_in(c, recorder, "failed after");
  expect_in(c, recorder, "collective #5      allreduce(i64, 7, sum)");
  expect_in(c, recorder, "done in");
}

}  // namespace tessera::conformance

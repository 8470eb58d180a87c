// Starting the ranks of a collective benchmark: threads of this process for
// a thread-rank backend, or this process as one rank of a process backend.
#pragma once

#include <cstdint>
#include <vector>

#include "bench_engine.hpp"
#include "tessera/core/comm.hpp"

namespace tessera::cli {

// Receives the benchmark's progress; called for rank 0 only (with thread
// ranks, begin/end run on the calling thread and row on rank 0's thread).
class BenchReporter {
 public:
  BenchReporter() = default;
  BenchReporter(const BenchReporter&) = delete;
  BenchReporter& operator=(const BenchReporter&) = delete;
  virtual ~BenchReporter() = default;
  // Before any size runs. `thread_ranks`: the ranks are threads.
  virtual void begin(const BenchPlan& plan, bool thread_ranks) = 0;
  virtual void row(const BenchRow& row) = 0;
  // After the last size, if everything succeeded.
  virtual void end() = 0;
};

// Runs the benchmark of `spec` over `requested` sizes on `backend`.
//  - Thread-rank backend: `ranks` (>= 1) threads each connect with their
//    rank; if one fails, every connected communicator is aborted so the
//    others stop waiting, and the first failure is rethrown.
//  - Process backend: this process connects once as the rank its
//    environment gives; `ranks` must be -1 (take the world size) or equal the
//    world size, else UsageError. On failure this rank aborts its
//    communicator (so peers fail fast) and rethrows.
// With spec.compare_raw every rank first checks the backend's raw call
// (check_raw_call), before the reporter's begin: a backend without one fails
// with UsageError and no table is printed.
// Throws UsageError when no requested size fits (see plan_bench).
void launch_bench(Backend& backend, int ranks, const BenchSpec& spec,
                  const std::vector<uint64_t>& requested, BenchReporter& reporter);

}  // namespace tessera::cli

// The collective benchmark on one rank, in the manner of nccl-tests: per
// size, warm-up iterations, a barrier, `iters` timed iterations of the
// blocking operation; the time of a size is the largest per-rank average,
// gathered through the communicator under test. A correctness pass with a
// known pattern follows each size, and the mismatches of all ranks are
// summed (again through the communicator).
//
// With compare_raw the same buffers are also run through the backend's raw
// library call: `warmup` untimed operations on each path, then
// kCompareRounds rounds, each timing `iters` operations on both paths
// (after a barrier each), the plugin first in even rounds and the raw call
// first in odd ones. A round's time is the largest per-rank average, and
// each path reports its best round: on a shared machine interference only
// ever adds time, and alternating the order exposes both paths to the same
// drift. Both results are checked.
//
// With a CUDA device in the spec every buffer is device memory: the pattern
// is copied in and the results copied out before and after the timed loops,
// and the check runs on the host copy.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "bench_ops.hpp"
#include "size_list.hpp"
#include "tessera/core/comm.hpp"

namespace tessera::cli {

struct BenchSpec {
  tessera_coll_type op = TESSERA_COLL_ALLREDUCE;
  tessera_dtype dtype = TESSERA_F32;
  tessera_reduce_op redop = TESSERA_SUM;
  int iters = 20;            // >= 1
  int warmup = 5;            // >= 0
  bool compare_raw = false;  // also time the backend's raw library call
  // Where every buffer lives, the bookkeeping exchanges' included (see
  // bench_buffer.hpp): host memory, or this rank's CUDA device.
  tessera_device device{TESSERA_DEVICE_CPU, 0};
};

// Rounds per path with compare_raw (see the top of this file).
inline constexpr int kCompareRounds = 3;

// Sizes actually run for a group size, after rounding.
struct BenchPlan {
  int ranks = 1;
  uint64_t unit = 1;               // every size is a multiple of this (bytes)
  std::vector<PlannedSize> sizes;  // in order, at least one
  std::vector<uint64_t> dropped;   // requested sizes smaller than one unit
};

// Rounds `requested` down to multiples of the op's unit (element size, times
// `ranks` for ops split by rank). Throws UsageError when no size is left.
BenchPlan plan_bench(const BenchSpec& spec, const std::vector<uint64_t>& requested, int ranks);

// The most host memory one rank's buffers take at once, in bytes: the send
// and receive buffers of the plan's largest size (a CUDA run keeps a host
// copy of each).
uint64_t rank_buffer_bytes(const BenchSpec& spec, const BenchPlan& plan);

// One result line.
struct BenchRow {
  uint64_t bytes = 0;       // size as defined in bench_ops.hpp
  uint64_t count = 0;       // bytes / element size
  double time_us = 0.0;     // max over ranks of the per-rank average
  double algbw_gbps = 0.0;  // bytes / time
  double busbw_gbps = 0.0;  // algbw x busbw_factor
  uint64_t wrong = 0;       // mismatching elements summed over ranks
  // With compare_raw only:
  bool compared_raw = false;  // the fields below are set
  double raw_time_us = 0.0;   // like time_us, through the raw library call
  uint64_t raw_wrong = 0;     // like wrong, for the raw call's result
};

// Runs every size of `plan` on this rank. Collective: all ranks of `comm`
// call it with the same spec and plan. Rank 0 calls on_row after each size.
// Backend failures propagate as tessera::Error; buffer allocation failure
// as std::bad_alloc. With spec.compare_raw the caller must have checked the
// raw call first (check_raw_call in bench_raw.hpp); a time-out of the plugin's
// path still fails, but the raw call itself waits without one.
void run_bench_rank(Communicator& comm, const BenchSpec& spec, const BenchPlan& plan,
                    const std::function<void(const BenchRow&)>& on_row);

}  // namespace tessera::cli

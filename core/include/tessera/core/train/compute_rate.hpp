// The compute a rank has: its thread count (run.threads_per_rank or the
// cores this process may use shared among the ranks on its node) and the
// single-precision GEMM peak of those threads, what model FLOP utilisation
// (MFU) is measured against.
#pragma once

#include <string>

#include "tessera/core/config.hpp"

namespace tessera::train {

struct RankThreads {
  int threads = 1;
  std::string source;  // "run.threads_per_rank", "2 cores / 1 local rank"
};

// Cores this process may run on (its CPU affinity mask; at least 1).
int usable_cores();

// run.threads_per_rank when set; else usable_cores() / local_ranks (at
// least 1), where local_ranks is the number of ranks sharing this node's
// cores (the world for ranks as threads, LOCAL_WORLD_SIZE for processes).
RankThreads rank_threads(const RunSection& run, int local_ranks);

// The peak sgemm rate of `threads` threads, in FLOP/s: the rate of one
// 512x512x512 product on one OpenBLAS thread (the calling one; best of 5
// rounds after a warm-up, about 20 ms) times `threads`, as a GPU's peak is
// its per-SM rate times its SMs. Measuring the threads at once would
// instead measure how busy the other cores are.
double measure_gemm_rate(int threads);

}  // namespace tessera::train

// Threads per rank and the GEMM rate of a rank (see compute_rate.hpp).
#include "tessera/core/train/compute_rate.hpp"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace tessera::train {
namespace {

constexpr int kGemmSize = 512;
constexpr int kGemmRounds = 6;  // the first is a warm-up

// Seconds for one 512^3 sgemm on the calling thread, best of the rounds
// after the first.
double time_gemm() {
  const std::size_t n = kGemmSize;
  std::vector<float> a(n * n, 0.5F);
  std::vector<float> b(n * n, 0.25F);
  std::vector<float> c(n * n, 0.0F);
  double best = 1e300;
  for (int round = 0; round < kGemmRounds; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kGemmSize, kGemmSize, kGemmSize, 1.0F,
                a.data(), kGemmSize, b.data(), kGemmSize, 0.0F, c.data(), kGemmSize);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (round > 0) best = std::min(best, dt.count());
  }
  return best;
}

}  // namespace

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(CPU_COUNT(&set), 1);
  return static_cast<int>(std::max(std::thread::hardware_concurrency(), 1U));
}

RankThreads rank_threads(const RunSection& run, int local_ranks) {
  if (run.threads_per_rank > 0) return {run.threads_per_rank, "run.threads_per_rank"};
  const int cores = usable_cores();
  const int ranks = std::max(local_ranks, 1);
  return {std::max(cores / ranks, 1),
          fmt::format("{} core{} / {} local rank{}", cores, cores == 1 ? "" : "s", ranks,
                      ranks == 1 ? "" : "s")};
}

double measure_gemm_rate(int threads) {
  // The models pin OpenBLAS to one thread; so does this.
  openblas_set_num_threads(1);
  const double one = 2.0 * kGemmSize * kGemmSize * kGemmSize / std::max(time_gemm(), 1e-9);
  return one * std::max(threads, 1);
}

}  // namespace tessera::train

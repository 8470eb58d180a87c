// Intra-op parallelism (tessera/sdk/intra_op.hpp) and the GEMM split over a
// rank's threads: parallel_for's static partition, its error path, and
// kernels::gemm repeatable at a fixed thread count.
#include "tessera/sdk/intra_op.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "tessera/models/kernels.hpp"

namespace tessera::model::kernels {
namespace {

namespace intra_op = sdk::intra_op;

TEST(IntraOp, ChunksCoverTheRangeOnceInAStaticPartition) {
  const intra_op::ThreadsScope scope(3);
  EXPECT_EQ(intra_op::threads(), 3);
  EXPECT_EQ(intra_op::chunks_for(100, 10), 3);
  EXPECT_EQ(intra_op::chunks_for(25, 10), 2);
  EXPECT_EQ(intra_op::chunks_for(15, 10), 1);
  std::vector<std::atomic<int>> hits(1000);
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  intra_op::parallel_for(1000, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) ++hits[static_cast<std::size_t>(i)];
    const std::lock_guard lock(mu);
    chunks.emplace_back(begin, end);
  });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
  std::sort(chunks.begin(), chunks.end());
  const std::vector<std::pair<int64_t, int64_t>> expected{{0, 333}, {333, 666}, {666, 1000}};
  EXPECT_EQ(chunks, expected);
}

TEST(IntraOp, OneThreadRunsOnTheCaller) {
  const intra_op::ThreadsScope scope(1);
  int calls = 0;
  intra_op::parallel_for(10, 1, [&](int64_t begin, int64_t end) {
    ++calls;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 10);
  });
  EXPECT_EQ(calls, 1);
}

TEST(IntraOp, AChunksExceptionReachesTheCallerAfterAllChunksEnd) {
  const intra_op::ThreadsScope scope(4);
  std::atomic<int> done{0};
  EXPECT_THROW(intra_op::parallel_for(4, 1,
                                      [&](int64_t begin, int64_t /*end*/) {
                                        ++done;
                                        if (begin == 2) throw std::runtime_error("chunk 2");
                                      }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 4);
  // The pool still works afterwards.
  std::atomic<int> again{0};
  intra_op::parallel_for(4, 1, [&](int64_t, int64_t) { ++again; });
  EXPECT_EQ(again.load(), 4);
}

TEST(IntraOp, ScopeRestoresTheThreadCount) {
  intra_op::set_threads(1);
  {
    const intra_op::ThreadsScope scope(2);
    EXPECT_EQ(intra_op::threads(), 2);
  }
  EXPECT_EQ(intra_op::threads(), 1);
  intra_op::set_threads(0);
  EXPECT_EQ(intra_op::threads(), 1);
}

std::vector<float> filled(int64_t count, uint32_t seed) {
  std::vector<float> v(static_cast<std::size_t>(count));
  uint32_t x = seed;
  for (float& f : v) {
    x = x * 1664525U + 1013904223U;
    f = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
  }
  return v;
}

// C = op(A)·op(B) + C at `threads` threads.
std::vector<float> product(int threads, bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  const std::vector<float> a = filled(m * k, 1);
  const std::vector<float> b = filled(k * n, 2);
  std::vector<float> c = filled(m * n, 3);
  const intra_op::ThreadsScope scope(threads);
  gemm(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 1.0f, c.data(), n);
  return c;
}

// A fixed thread count always gives the same bits, and every count agrees
// with one thread to rounding (to the bit where OpenBLAS's row tile
// divides the split's 96-row blocks, as on the x86-64 kernels).
TEST(IntraOp, GemmIsRepeatableAtAFixedThreadCountAndAgreesAcrossCounts) {
  struct Shape {
    int64_t m, n, k;
  };
  // Ragged edges, too few rows to split, and the shapes of a gpt layer's
  // forward and backward.
  for (const Shape s : {Shape{2048, 384, 128}, Shape{128, 512, 2048}, Shape{517, 131, 77},
                        Shape{37, 1000, 64}, Shape{64, 64, 32}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        const std::vector<float> one = product(1, ta, tb, s.m, s.n, s.k);
        for (const int threads : {2, 3}) {
          const std::vector<float> split = product(threads, ta, tb, s.m, s.n, s.k);
          EXPECT_EQ(product(threads, ta, tb, s.m, s.n, s.k), split);
          double worst = 0;
          for (std::size_t i = 0; i < one.size(); ++i) {
            worst = std::max(worst, static_cast<double>(std::abs(split[i] - one[i])));
          }
          // Entries are sums of k products of values in [-0.5, 0.5).
          EXPECT_LE(worst, 1e-6 * static_cast<double>(s.k))
              << s.m << "x" << s.n << "x" << s.k << " ta " << ta << " tb " << tb << " threads "
              << threads;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera::model::kernels

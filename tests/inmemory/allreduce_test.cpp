// Allreduce through the plugin's C table: every dtype and op, in place and
// out of place, 1-4 ranks, counts that do not divide by the rank count.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "harness.hpp"

namespace tessera::test {
namespace {

// Small integers, exact in every dtype; PROD stays within {-1, 1, 2}
// ({1, 2} for u8) so products of up to 4 ranks are exact.
template <typename T>
double input(tessera_reduce_op op, int32_t rank, uint64_t i) {
  const auto k = static_cast<int64_t>(i) + rank;
  if (op == TESSERA_PROD) {
    if (k % 3 == 0) return 2;
    return (std::is_unsigned_v<T> || k % 3 == 2) ? 1 : -1;
  }
  if constexpr (std::is_unsigned_v<T>) {
    return static_cast<double>((i * 3 + static_cast<uint64_t>(rank) * 5) % 7);
  }
  return static_cast<double>((static_cast<int64_t>(i) * 7 + int64_t{rank} * 3) % 11) - 5;
}

template <typename T>
T expected(tessera_reduce_op op, int32_t size, uint64_t i) {
  double acc = input<T>(op, 0, i);
  for (int32_t r = 1; r < size; ++r) {
    const double v = input<T>(op, r, i);
    switch (op) {
      case TESSERA_MIN:
        acc = std::min(acc, v);
        break;
      case TESSERA_MAX:
        acc = std::max(acc, v);
        break;
      case TESSERA_PROD:
        acc *= v;
        break;
      default:
        acc += v;
        break;
    }
  }
  if (op != TESSERA_AVG) return from_double<T>(acc);
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<int64_t>(acc) / size);  // truncates toward zero
  } else if constexpr (std::is_same_v<T, double>) {
    return acc / size;
  } else {
    return from_double<T>(static_cast<double>(static_cast<float>(acc) / static_cast<float>(size)));
  }
}

template <typename T>
void check_allreduce(Comm& comm, tessera_reduce_op op, uint64_t count, bool in_place) {
  const int32_t rank = comm.rank();
  std::vector<T> send(count);
  for (uint64_t i = 0; i < count; ++i) send[i] = from_double<T>(input<T>(op, rank, i));
  const std::vector<T> original = send;
  std::vector<T> recv(count, from_double<T>(99));
  if (in_place) {
    comm.run(args(TESSERA_COLL_ALLREDUCE, buf(send), buf(send), op));
  } else {
    comm.run(args(TESSERA_COLL_ALLREDUCE, buf(send), buf(recv), op));
    for (uint64_t i = 0; i < count; ++i) {
      if (to_double(send[i]) != to_double(original[i])) {
        throw std::runtime_error("out-of-place allreduce modified its send buffer");
      }
    }
  }
  const std::vector<T>& got = in_place ? send : recv;
  for (uint64_t i = 0; i < count; ++i) {
    const double want = to_double(expected<T>(op, comm.size(), i));
    if (to_double(got[i]) != want) {
      std::ostringstream msg;
      msg << "rank " << rank << " of " << comm.size() << ": allreduce "
          << dtype_name(dtype_of<T>::value) << " " << reduce_op_name(op) << " count " << count
          << (in_place ? " in place" : " out of place") << ": element " << i << " is "
          << to_double(got[i]) << ", expected " << want;
      throw std::runtime_error(msg.str());
    }
  }
}

class AllreduceRanks : public ::testing::TestWithParam<int32_t> {};

// Runs every dtype x op x count, in and out of place, once on the cached
// path (1 KiB blocks: many blocks per chunk) and once on the streaming path
// (stream_kb = 1: non-temporal stores through the tile).
TEST_P(AllreduceRanks, EveryDtypeOpCountInAndOutOfPlace) {
  for (const int64_t stream_kb : {int64_t{0}, int64_t{1}}) {
    BackendConfig config;
    config.world_size = GetParam();
    config.block_kb = 1;
    config.stream_kb = stream_kb;
    run_ok(config, [](Comm& comm) {
      const std::vector<uint64_t> counts = {0, 1, 2, 3, 5, 7, 13, 1003, 5000};
      for_each_dtype([&](auto tag) {
        using T = decltype(tag);
        for (tessera_reduce_op op = 0; op < TESSERA_REDUCE_OP_COUNT; ++op) {
          for (const uint64_t count : counts) {
            check_allreduce<T>(comm, op, count, false);
            check_allreduce<T>(comm, op, count, true);
          }
        }
      });
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllreduceRanks, ::testing::Values(1, 2, 3, 4));

// In place, rank r only reads and writes chunk r of every buffer. With 1 KiB
// blocks and a count that is not divisible by the rank count, any rank
// touching another's chunk would read partly reduced values and the exact
// integer sums would come out wrong.
TEST(Allreduce, InPlaceWithManyBlocksIsExact) {
  for (const int32_t ranks : {2, 3, 4}) {
    BackendConfig config;
    config.world_size = ranks;
    config.block_kb = 1;
    config.stream_kb = 0;
    run_ok(config, [](Comm& comm) {
      const uint64_t count = (uint64_t{3} << 14) + 5;
      for (int iter = 0; iter < 3; ++iter) {
        check_allreduce<int32_t>(comm, TESSERA_SUM, count, true);
        check_allreduce<float>(comm, TESSERA_MAX, count, true);
      }
    });
  }
}

// 8 MiB of f32 on 3 ranks (48 MiB of buffers): the default options take the
// streaming path.
TEST(Allreduce, LargeF32MatchesWithDefaultOptions) {
  BackendConfig config;
  config.world_size = 3;
  run_ok(config, [](Comm& comm) {
    check_allreduce<float>(comm, TESSERA_SUM, (uint64_t{1} << 21) + 3, false);
    check_allreduce<float>(comm, TESSERA_AVG, (uint64_t{1} << 21) + 3, true);
    check_allreduce<float>(comm, TESSERA_MIN, (uint64_t{1} << 18) + 1, true);
  });
}

// Non-integer f32 inputs: every rank must hold the very same bits.
TEST(Allreduce, ResultsAreBitIdenticalAcrossRanks) {
  constexpr int32_t kRanks = 4;
  constexpr size_t kCount = 10007;
  std::vector<std::vector<float>> results(kRanks, std::vector<float>(kCount));
  BackendConfig config;
  config.world_size = kRanks;
  config.block_kb = 4;
  run_ok(config, [&](Comm& comm) {
    std::mt19937 gen(static_cast<unsigned>(comm.rank()) + 1U);
    std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
    std::vector<float> data(kCount);
    for (auto& v : data) v = dist(gen);
    comm.run(args(TESSERA_COLL_ALLREDUCE, buf(data), buf(data), TESSERA_AVG));
    results[static_cast<size_t>(comm.rank())] = data;
  });
  for (int32_t r = 1; r < kRanks; ++r) {
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(results[0][i]), std::bit_cast<uint32_t>(results[r][i]))
          << "rank " << r << " differs from rank 0 at element " << i;
    }
  }
}

// With spin_us = 0 every wait sleeps on the futex at once.
TEST(Allreduce, WorksWithoutSpinning) {
  BackendConfig config;
  config.world_size = 4;
  config.spin_us = 0;
  run_ok(config, [](Comm& comm) {
    for (int i = 0; i < 50; ++i) check_allreduce<int64_t>(comm, TESSERA_SUM, 37, i % 2 == 0);
  });
}

}  // namespace
}  // namespace tessera::test

// The SDK helpers every backend shares: reduce.hpp kernels and
// coll.hpp's validate_coll_args.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "harness.hpp"
#include "tessera/sdk/coll.hpp"
#include "tessera/sdk/reduce.hpp"

namespace tessera::test {
namespace {

using ::testing::HasSubstr;

TEST(ReduceKernels, SourcesOfEveryDtypeAndOp) {
  // 3 sources, a count that leaves a partial tile.
  constexpr size_t kCount = 600;
  for_each_dtype([&](auto tag) {
    using T = decltype(tag);
    std::vector<std::vector<T>> src(3, std::vector<T>(kCount));
    for (size_t k = 0; k < 3; ++k) {
      for (size_t i = 0; i < kCount; ++i) {
        src[k][i] = from_double<T>(static_cast<double>((i + 2 * k) % 5) + 1);
      }
    }
    const void* srcs[3] = {src[0].data(), src[1].data(), src[2].data()};
    for (tessera_reduce_op op = 0; op < TESSERA_REDUCE_OP_COUNT; ++op) {
      std::vector<T> out(kCount);
      sdk::reduce_sources(out.data(), srcs, 3, kCount, dtype_of<T>::value, op);
      for (size_t i = 0; i < kCount; ++i) {
        const double a = to_double(src[0][i]);
        const double b = to_double(src[1][i]);
        const double c = to_double(src[2][i]);
        double want = 0;
        switch (op) {
          case TESSERA_SUM:
            want = a + b + c;
            break;
          case TESSERA_AVG:
            if constexpr (std::is_integral_v<T>) {
              const int64_t quotient = static_cast<int64_t>(a + b + c) / 3;  // toward zero
              want = static_cast<double>(quotient);
            } else if constexpr (std::is_same_v<T, double>) {
              want = (a + b + c) / 3;
            } else {  // f32 accumulation, one rounding to T
              want = to_double(
                  from_double<T>(static_cast<double>(static_cast<float>(a + b + c) / 3.0F)));
            }
            break;
          case TESSERA_MIN:
            want = std::min({a, b, c});
            break;
          case TESSERA_MAX:
            want = std::max({a, b, c});
            break;
          default:
            want = a * b * c;
            break;
        }
        ASSERT_EQ(to_double(out[i]), want)
            << dtype_name(dtype_of<T>::value) << " " << reduce_op_name(op) << " at " << i;
      }
    }
  });
}

TEST(ReduceKernels, InPlacePairwiseAndFinishAvg) {
  std::vector<int32_t> acc = {-7, 7, 9, -9, 1};
  const std::vector<int32_t> more = {0, 0, 0, 0, 0};
  sdk::reduce_into(acc.data(), more.data(), acc.size(), TESSERA_I32, TESSERA_AVG);
  sdk::finish_avg(acc.data(), acc.size(), TESSERA_I32, 2);
  EXPECT_EQ(acc, (std::vector<int32_t>{-3, 3, 4, -4, 0}));  // toward zero

  std::vector<half> h = {to_half(1.5F), to_half(-2.0F)};
  const std::vector<half> h2 = {to_half(0.5F), to_half(4.0F)};
  sdk::reduce_into(h.data(), h2.data(), h.size(), TESSERA_F16, TESSERA_MAX);
  EXPECT_EQ(to_float(h[0]), 1.5F);
  EXPECT_EQ(to_float(h[1]), 4.0F);
}

TEST(ReduceKernels, SignedOverflowWrapsAndIntegerAvgIsExact) {
  std::vector<int32_t> a = {std::numeric_limits<int32_t>::max()};
  const std::vector<int32_t> b = {1};
  sdk::reduce_into(a.data(), b.data(), 1, TESSERA_I32, TESSERA_SUM);
  EXPECT_EQ(a[0], std::numeric_limits<int32_t>::min());
  // u8 avg of 200, 250: the 64-bit accumulator avoids wrapping.
  const std::vector<uint8_t> x = {200};
  const std::vector<uint8_t> y = {250};
  std::vector<uint8_t> out(1);
  const void* srcs[2] = {x.data(), y.data()};
  sdk::reduce_sources(out.data(), srcs, 2, 1, TESSERA_U8, TESSERA_AVG);
  EXPECT_EQ(out[0], 225);
}

TEST(ReduceKernels, UnknownDtypeOrOpThrows) {
  std::vector<float> v(4);
  try {
    sdk::reduce_into(v.data(), v.data(), 4, 77, TESSERA_SUM);
    ADD_FAILURE() << "unknown dtype accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("dtype 77"));
  }
  try {
    sdk::reduce_into(v.data(), v.data(), 4, TESSERA_F32, 9);
    ADD_FAILURE() << "unknown op accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("reduce op 9"));
  }
}

// validate_coll_args accepts every well-formed call and ignores the buffers
// a rank does not use.
TEST(ValidateCollArgs, AcceptsTheDocumentedShapes) {
  std::vector<float> s(12);
  std::vector<float> r(12);
  const uint32_t cpu = TESSERA_BACKEND_CAP_CPU_BUFFERS;
  const tessera_buffer unused = raw_buf(nullptr, 0, 42);  // ignored, even with a bad dtype
  const auto ok = [&](const tessera_coll_args& a, int32_t rank) {
    EXPECT_NO_THROW(sdk::validate_coll_args(a, rank, 3, cpu)) << coll_name(a.coll);
  };
  ok(args(TESSERA_COLL_ALLREDUCE, raw_buf(s.data(), 4, 0), raw_buf(r.data(), 4, 0)), 0);
  ok(args(TESSERA_COLL_ALLGATHER, raw_buf(s.data(), 4, 0), raw_buf(r.data(), 12, 0)), 1);
  ok(args(TESSERA_COLL_REDUCE_SCATTER, raw_buf(s.data(), 12, 0), raw_buf(r.data(), 4, 0)), 2);
  ok(args(TESSERA_COLL_ALLTOALL, raw_buf(s.data(), 12, 0), raw_buf(r.data(), 12, 0)), 0);
  ok(args(TESSERA_COLL_BROADCAST, unused, raw_buf(r.data(), 4, 0), TESSERA_SUM, 2), 1);
  ok(args(TESSERA_COLL_REDUCE, raw_buf(s.data(), 4, 0), unused, TESSERA_SUM, 2), 1);
  ok(args(TESSERA_COLL_GATHER, raw_buf(s.data(), 4, 0), unused, TESSERA_SUM, 0), 1);
  ok(args(TESSERA_COLL_SCATTER, unused, raw_buf(r.data(), 4, 0), TESSERA_SUM, 0), 1);
  ok(args(TESSERA_COLL_BARRIER, unused, unused), 2);
  ok(p2p(TESSERA_COLL_SEND, raw_buf(s.data(), 4, 0), 2, 0), 0);
  ok(p2p(TESSERA_COLL_RECV, raw_buf(r.data(), 0, 0), 1, 5), 0);
  EXPECT_EQ(sdk::coll_block_count(
                args(TESSERA_COLL_ALLTOALL, raw_buf(s.data(), 12, 0), raw_buf(r.data(), 12, 0)), 3),
            4U);
}

TEST(ValidateCollArgs, RejectsWithPreciseMessages) {
  std::vector<float> s(12);
  std::vector<float> r(12);
  const uint32_t cpu = TESSERA_BACKEND_CAP_CPU_BUFFERS;
  const auto message = [&](const tessera_coll_args& a, int32_t rank) -> std::string {
    try {
      sdk::validate_coll_args(a, rank, 3, cpu);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(
      message(args(TESSERA_COLL_REDUCE_SCATTER, raw_buf(s.data(), 11, 0), raw_buf(r.data(), 4, 0)),
              1),
      "reduce_scatter on rank 1 of 3: send.count must be recv.count * group size = 12, "
      "got 11");
  EXPECT_THAT(message(args(TESSERA_COLL_GATHER, raw_buf(s.data(), 4, 0), raw_buf(r.data(), 4, 0),
                           TESSERA_SUM, 0),
                      0),
              HasSubstr("recv.count must be send.count * group size = 12, got 4"));
  EXPECT_THAT(message(args(TESSERA_COLL_SCATTER, raw_buf(s.data(), 4, 0), raw_buf(r.data(), 4, 0),
                           TESSERA_SUM, -1),
                      0),
              HasSubstr("root -1 is out of range [0, 3)"));
  EXPECT_THAT(message(p2p(TESSERA_COLL_RECV, raw_buf(r.data(), 4, 0), 3, 0), 0),
              HasSubstr("peer 3 is out of range"));
  EXPECT_THAT(message(p2p(TESSERA_COLL_RECV, raw_buf(nullptr, 4, 0), 1, 0), 0),
              HasSubstr("recv.data is null with recv.count = 4"));
  EXPECT_THAT(
      message(args(TESSERA_COLL_ALLREDUCE, raw_buf(s.data(), 4, 0), raw_buf(r.data(), 5, 0)), 0),
      HasSubstr("recv.count must be send.count = 4, got 5"));
  auto mixed = args(TESSERA_COLL_ALLREDUCE, raw_buf(s.data(), 4, 0), raw_buf(r.data(), 4, 0));
  mixed.recv.device.type = 5;
  EXPECT_THAT(message(mixed, 0), HasSubstr("unknown device (type 5)"));
  // CUDA buffers are fine for a backend that declares them.
  auto cuda = args(TESSERA_COLL_ALLREDUCE, raw_buf(s.data(), 4, 0), raw_buf(r.data(), 4, 0));
  cuda.send.device.type = TESSERA_DEVICE_CUDA;
  cuda.recv.device.type = TESSERA_DEVICE_CUDA;
  EXPECT_NO_THROW(sdk::validate_coll_args(cuda, 0, 3, TESSERA_BACKEND_CAP_CUDA_BUFFERS));
  EXPECT_THAT(message(cuda, 0), HasSubstr("cuda device"));
}

}  // namespace
}  // namespace tessera::test

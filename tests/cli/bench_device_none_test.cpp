// The stand-in for a tessera built without the CUDA Toolkit
// (apps/tessera/bench_device_none.cpp), compiled here on its own so that
// its refusals are checked in every build: each device call is the same
// usage error.
#include <gtest/gtest.h>

#include <string>

#include "bench_device.hpp"
#include "cli_error.hpp"
#include "usage_error_of.hpp"

namespace tessera::cli {
namespace {

constexpr const char* kBuiltWithout =
    "--device cuda: this tessera was built without the CUDA Toolkit";

using test::usage_error_of;

TEST(BenchDeviceNone, EveryDeviceCallIsTheBuiltWithoutUsageError) {
  EXPECT_FALSE(cuda_built());
  EXPECT_EQ(usage_error_of([] { (void)cuda_device_count(); }), kBuiltWithout);
  EXPECT_EQ(usage_error_of([] { const CudaMemory m(0, 64); }), kBuiltWithout);
  CudaMemory empty;
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0U);
  char byte = 0;
  EXPECT_EQ(usage_error_of([&] { empty.upload(&byte); }), kBuiltWithout);
  EXPECT_EQ(usage_error_of([&] { empty.download(&byte); }), kBuiltWithout);
}

}  // namespace
}  // namespace tessera::cli

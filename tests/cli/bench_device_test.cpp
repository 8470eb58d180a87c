// `bench collectives --device`: the flag's values, LOCAL_RANK as the CUDA
// ordinal, host buffers through BenchBuffer, the device in the report's
// header and CSV, and (on a machine without a GPU) the refusal to find a
// CUDA device. Nothing here needs a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "bench_buffer.hpp"
#include "bench_command.hpp"
#include "bench_report.hpp"
#include "cli_error.hpp"
#include "usage_error_of.hpp"

namespace tessera::cli {
namespace {

using test::usage_error_of;

TEST(BenchDevice, FlagValues) {
  EXPECT_EQ(parse_bench_device("cpu"), TESSERA_DEVICE_CPU);
  EXPECT_EQ(parse_bench_device("cuda"), TESSERA_DEVICE_CUDA);
  EXPECT_FALSE(parse_bench_device("tpu").has_value());
  EXPECT_FALSE(parse_bench_device("CUDA").has_value());
  EXPECT_EQ(device_text(tessera_device{TESSERA_DEVICE_CPU, 0}), "cpu");
  EXPECT_EQ(device_text(tessera_device{TESSERA_DEVICE_CUDA, 3}), "cuda:3");
}

TEST(BenchDevice, ValidateTakesTheDeviceAndRefusesAnUnknownOne) {
  BenchArgs args;
  args.op = "allreduce";
  args.sizes = "1K";
  EXPECT_EQ(validate_bench_args(args).spec.device.type, TESSERA_DEVICE_CPU);
  args.device = "cuda";
  const BenchRequest req = validate_bench_args(args);
  EXPECT_EQ(req.spec.device.type, TESSERA_DEVICE_CUDA);
  EXPECT_EQ(req.spec.device.index, 0);
  args.device = "tpu";
  EXPECT_EQ(usage_error_of([&] { (void)validate_bench_args(args); }),
            "unknown device 'tpu' for --device (use cpu, cuda)");
}

TEST(BenchDevice, LocalRankPicksTheOrdinal) {
  EXPECT_EQ(bench_cuda_ordinal(nullptr), 0);
  EXPECT_EQ(bench_cuda_ordinal("0"), 0);
  EXPECT_EQ(bench_cuda_ordinal("7"), 7);
  EXPECT_EQ(bench_cuda_ordinal("4095"), 4095);
  for (const char* bad : {"", "x", "-1", "4096", "1a", " 1", "99999999999"}) {
    EXPECT_EQ(usage_error_of([&] { (void)bench_cuda_ordinal(bad); }),
              "--device cuda: environment variable LOCAL_RANK='" + std::string(bad) +
                  "' is not a device number in 0..4095 (it picks this rank's CUDA device)")
        << bad;
  }
}

TEST(BenchDevice, HostBufferIsItsOwnHostCopy) {
  BenchBuffer b(tessera_device{TESSERA_DEVICE_CPU, 0}, 5, TESSERA_I32);
  EXPECT_EQ(b.view().data, static_cast<void*>(b.host()));
  EXPECT_EQ(b.view().count, 5U);
  EXPECT_EQ(b.view().dtype, TESSERA_I32);
  EXPECT_EQ(b.view().device.type, TESSERA_DEVICE_CPU);
  const auto* bytes = b.host();
  EXPECT_TRUE(std::all_of(bytes, bytes + 5 * sizeof(int32_t),
                          [](std::byte v) { return v == std::byte{0}; }));
  const int32_t values[5] = {1, -2, 3, -4, 5};
  std::memcpy(b.host(), values, sizeof values);
  b.to_device();
  b.to_host();
  EXPECT_EQ(std::memcmp(b.host(), values, sizeof values), 0);
}

TEST(BenchDevice, WithoutAGpuNoCudaDeviceIsFound) {
  if (!cuda_built()) {
    EXPECT_EQ(usage_error_of([] { (void)cuda_device_count(); }),
              "--device cuda: this tessera was built without the CUDA Toolkit");
    return;
  }
  if (std::filesystem::exists("/dev/nvidia0")) GTEST_SKIP() << "this machine has a GPU";
  try {
    (void)bench_cuda_device(nullptr);
    FAIL() << "expected no CUDA device";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_UNSUPPORTED);
    EXPECT_EQ(std::string(e.what()).rfind("--device cuda: no CUDA device (cudaGetDeviceCount: ", 0),
              0U)
        << e.what();
  }
}

// The report of one 1 KiB row on `device` over 2 ranks.
struct DeviceReport {
  std::string text;
  std::string csv_row;
};

DeviceReport report_on(const tessera_device& device, bool thread_ranks) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "tessera_bench_device.csv";
  std::filesystem::remove(path);
  BenchSpec spec;
  spec.device = device;
  BenchPlan plan;
  plan.ranks = 2;
  plan.unit = 8;
  plan.sizes = {PlannedSize{1024, 1024}};
  BenchRow row;
  row.bytes = 1024;
  row.count = 256;
  row.time_us = 10.0;
  std::ostringstream out;
  {
    TextBenchReporter reporter(BenchHeader{"fake", spec, 60.0, path.string()}, out);
    reporter.begin(plan, thread_ranks);
    reporter.row(row);
    reporter.end();
  }
  DeviceReport report{out.str(), ""};
  std::ifstream in(path);
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header.rfind("backend,ranks,op,size_bytes,count,type,redop,device,time_us,", 0), 0U)
      << header;
  std::getline(in, report.csv_row);
  std::filesystem::remove(path);
  return report;
}

TEST(BenchDevice, ReportNamesTheDevice) {
  const DeviceReport cpu = report_on(tessera_device{TESSERA_DEVICE_CPU, 0}, true);
  EXPECT_NE(cpu.text.find("\n# device: cpu\n"), std::string::npos) << cpu.text;
  EXPECT_EQ(cpu.csv_row.rfind("fake,2,allreduce,1024,256,f32,sum,cpu,10.000,", 0), 0U)
      << cpu.csv_row;

  const DeviceReport threads = report_on(tessera_device{TESSERA_DEVICE_CUDA, 1}, true);
  EXPECT_NE(threads.text.find("\n# device: cuda:1\n"), std::string::npos) << threads.text;

  const DeviceReport processes = report_on(tessera_device{TESSERA_DEVICE_CUDA, 0}, false);
  EXPECT_NE(processes.text.find(
                "\n# device: cuda:0 (rank 0; every rank on the device of its LOCAL_RANK)\n"),
            std::string::npos)
      << processes.text;
  EXPECT_EQ(processes.csv_row.rfind("fake,2,allreduce,1024,256,f32,sum,cuda:0,10.000,", 0), 0U)
      << processes.csv_row;
}

}  // namespace
}  // namespace tessera::cli

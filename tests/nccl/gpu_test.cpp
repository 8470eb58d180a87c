// On a GPU (label `gpu`): a one-rank nccl world on device 0 runs every
// collective on device buffers, refuses host buffers without stage_host and
// stages them with it, and splits. Every test skips, saying why, when
// cudaGetDeviceCount finds no device, so this file passes on machines
// without a GPU. Run on an H100 with NCCL 2.28.9.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "../support/temp_dir.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/core/options.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/sdk/error.hpp"

#ifndef TESSERA_NCCL_TEST_PLUGIN_DIR
#error "TESSERA_NCCL_TEST_PLUGIN_DIR must name the build tree's plugin directory"
#endif

namespace tessera::nccltest {
namespace {

class NcclGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount: "
                   << (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices")
                   << "): the nccl GPU tests need one";
    }
    ::setenv("RANK", "0", 1);
    ::setenv("WORLD_SIZE", "1", 1);
    ::setenv("LOCAL_RANK", "0", 1);
    ::setenv("TESSERA_RENDEZVOUS_DIR", dir_.path().c_str(), 1);
    ::setenv("TESSERA_RUN_ID", "gpu-test", 1);
  }

  std::unique_ptr<Communicator> connect(const std::vector<std::string>& options = {}) {
    PluginRegistry registry;
    registry.scan(PluginRegistry::search_path({TESSERA_NCCL_TEST_PLUGIN_DIR}));
    const toml::table table = parse_option_overrides(options);
    BackendSettings settings;
    settings.timeout = std::chrono::milliseconds(20000);
    backend_ = open_backend(registry, "nccl", &table, "test options", settings);
    return backend_->connect(-1);
  }

  test::TempDir dir_{"nccl-gpu"};
  std::unique_ptr<Backend> backend_;
};

// n floats on device 0, filled with `value`.
struct DeviceFloats {
  DeviceFloats(size_t n, float value) : count(n) {
    EXPECT_EQ(cudaMalloc(&data, n * sizeof(float)), cudaSuccess);
    const std::vector<float> host(n, value);
    EXPECT_EQ(cudaMemcpy(data, host.data(), n * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  ~DeviceFloats() { (void)cudaFree(data); }
  [[nodiscard]] tessera_buffer buffer() const {
    return tessera_buffer{data, count, TESSERA_F32, tessera_device{TESSERA_DEVICE_CUDA, 0}};
  }
  [[nodiscard]] std::vector<float> read() const {
    std::vector<float> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
  void* data = nullptr;
  size_t count;
};

TEST_F(NcclGpu, EveryCollectiveRunsOnDeviceBuffersOfOneRank) {
  auto comm = connect();
  ASSERT_EQ(comm->size(), 1);
  DeviceFloats a(64, 2.0F);
  DeviceFloats b(64, 0.0F);
  comm->allreduce(a.buffer(), b.buffer(), TESSERA_SUM);
  EXPECT_EQ(b.read(), std::vector<float>(64, 2.0F));
  comm->allgather(a.buffer(), b.buffer());
  comm->reduce_scatter(a.buffer(), b.buffer(), TESSERA_MAX);
  comm->gather(a.buffer(), b.buffer(), 0);
  comm->scatter(a.buffer(), b.buffer(), 0);
  comm->alltoall(a.buffer(), b.buffer());
  comm->broadcast(a.buffer(), 0);
  comm->barrier();
  EXPECT_EQ(b.read(), std::vector<float>(64, 2.0F));
  Work w = comm->iallreduce(a.buffer(), a.buffer(), TESSERA_AVG);
  w.wait();
  EXPECT_EQ(a.read(), std::vector<float>(64, 2.0F));
}

// Avg over one rank is the identity, to the last element of an odd-sized
// f64 buffer, on device buffers and staged host buffers alike.
TEST_F(NcclGpu, AvgOverOneRankKeepsEveryElement) {
  auto comm = connect({"stage_host=true"});
  constexpr size_t kCount = 3001;
  std::vector<double> input(kCount);
  for (size_t i = 0; i < kCount; ++i) input[i] = static_cast<double>(i % 5) - 2.0;
  void* send = nullptr;
  void* recv = nullptr;
  ASSERT_EQ(cudaMalloc(&send, kCount * sizeof(double)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&recv, kCount * sizeof(double)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(send, input.data(), kCount * sizeof(double), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemset(recv, 0, kCount * sizeof(double)), cudaSuccess);
  const tessera_device gpu{TESSERA_DEVICE_CUDA, 0};
  comm->allreduce(tessera_buffer{send, kCount, TESSERA_F64, gpu},
                  tessera_buffer{recv, kCount, TESSERA_F64, gpu}, TESSERA_AVG);
  std::vector<double> out(kCount, 5.0);
  ASSERT_EQ(cudaMemcpy(out.data(), recv, kCount * sizeof(double), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(out, input);
  std::vector<double> staged(kCount, 5.0);
  const tessera_device cpu{TESSERA_DEVICE_CPU, 0};
  comm->allreduce(tessera_buffer{input.data(), kCount, TESSERA_F64, cpu},
                  tessera_buffer{staged.data(), kCount, TESSERA_F64, cpu}, TESSERA_AVG);
  EXPECT_EQ(staged, input);
  (void)cudaFree(send);
  (void)cudaFree(recv);
}

TEST_F(NcclGpu, HostBuffersAreRefusedWithoutStageHost) {
  auto comm = connect();
  std::vector<float> host(8, 1.0F);
  try {
    comm->allreduce(std::span<float>(host), TESSERA_SUM);
    ADD_FAILURE() << "a host buffer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host (cpu) buffer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("stage_host = true"), std::string::npos) << e.what();
  }
}

TEST_F(NcclGpu, HostBuffersAreStagedWithStageHost) {
  auto comm = connect({"stage_host=true"});
  std::vector<float> host(8, 3.0F);
  comm->allreduce(std::span<float>(host), TESSERA_SUM);
  EXPECT_EQ(host, std::vector<float>(8, 3.0F));
}

TEST_F(NcclGpu, SplitGivesAGroupOfItsOwn) {
  auto comm = connect();
  auto sub = comm->split(0, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  DeviceFloats a(4, 5.0F);
  sub->allreduce(a.buffer(), a.buffer(), TESSERA_SUM);
  EXPECT_EQ(a.read(), std::vector<float>(4, 5.0F));
  EXPECT_EQ(comm->split(-1, 0), nullptr);
}

}  // namespace
}  // namespace tessera::nccltest

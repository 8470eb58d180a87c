// Memory for the compute device (host ABI 1.5): TrackedBuffer allocates
// through the host's mem_alloc only on a run whose device is not the CPU,
// CommView hands such memory to a backend that takes CUDA buffers as CUDA
// buffers, and the host's own table on a CPU run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tessera/core/device.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/sdk/comm_view.hpp"
#include "tessera/sdk/tracked_buffer.hpp"

namespace tessera::test {
namespace {

// A host table that says the rank computes on CUDA device 3, allocates
// from the heap while counting, and calls every pointer it handed out
// device memory.
struct FakeDevice {
  int64_t allocated = 0;  // bytes handed out and not yet freed
  int allocations = 0;
  std::vector<const void*> live;
};
FakeDevice* g_fake = nullptr;

void fake_compute_device(void* /*ctx*/, tessera_device* out) {
  *out = tessera_device{TESSERA_DEVICE_CUDA, 3};
}
void* fake_alloc(void* /*ctx*/, uint64_t bytes) {
  g_fake->allocated += static_cast<int64_t>(bytes);
  ++g_fake->allocations;
  void* p = ::operator new(bytes);
  g_fake->live.push_back(p);
  return p;
}
void fake_free(void* /*ctx*/, void* ptr, uint64_t bytes) {
  g_fake->allocated -= static_cast<int64_t>(bytes);
  std::erase(g_fake->live, ptr);
  ::operator delete(ptr);
}
void fake_pointer_device(void* /*ctx*/, const void* ptr, tessera_device* out) {
  const bool ours = std::find(g_fake->live.begin(), g_fake->live.end(), ptr) != g_fake->live.end();
  *out = ours ? tessera_device{TESSERA_DEVICE_CUDA, 3} : tessera_device{TESSERA_DEVICE_CPU, 0};
}

struct CudaHost {
  FakeDevice device;
  HostContext ctx{"strategy.test"};
  tessera_host_api api = *ctx.api();
  CudaHost() {
    g_fake = &device;
    api.compute_device = &fake_compute_device;
    api.mem_alloc = &fake_alloc;
    api.mem_free = &fake_free;
    api.pointer_device = &fake_pointer_device;
  }
  CudaHost(const CudaHost&) = delete;
  CudaHost& operator=(const CudaHost&) = delete;
  ~CudaHost() { g_fake = nullptr; }
};

TEST(ComputeMemory, TrackedBufferAllocatesThroughTheHostOnACudaRun) {
  CudaHost host;
  const sdk::Host h(&host.api);
  EXPECT_EQ(h.compute_device().type, TESSERA_DEVICE_CUDA);
  EXPECT_EQ(h.compute_device().index, 3);
  {
    sdk::TrackedBuffer<float> buffer(h, 0, TESSERA_MEM_PARAMS, 10);
    EXPECT_EQ(host.device.allocated, 40);
    EXPECT_EQ(h.pointer_device(buffer.data()).type, TESSERA_DEVICE_CUDA);
    for (size_t i = 0; i < buffer.size(); ++i) EXPECT_EQ(buffer[i], 0.0f);
    buffer.resize(4);  // shrinking moves into a smaller allocation of the same kind
    EXPECT_EQ(host.device.allocated, 16);
    EXPECT_EQ(h.pointer_device(buffer.data()).type, TESSERA_DEVICE_CUDA);
    sdk::TrackedBuffer<float> moved(std::move(buffer));
    EXPECT_EQ(host.device.allocated, 16);
    moved.release();
    EXPECT_EQ(host.device.allocated, 0);
  }
  EXPECT_EQ(host.device.allocated, 0);
  EXPECT_GE(host.device.allocations, 2);
}

TEST(ComputeMemory, TrackedBufferUsesOrdinaryMemoryOnACpuRun) {
  const HostContext ctx("strategy.test");
  const sdk::Host h(ctx.api());
  ASSERT_EQ(h.compute_device().type, TESSERA_DEVICE_CPU);
  sdk::TrackedBuffer<double> buffer(h, 0, TESSERA_MEM_GRADS, 8);
  EXPECT_EQ(h.pointer_device(buffer.data()).type, TESSERA_DEVICE_CPU);
  EXPECT_EQ(buffer.tracked_bytes(), 64);
}

TEST(ComputeMemory, TheHostsAllocatorOnACpuRunIsZeroedAndAligned) {
  const HostContext ctx("strategy.test");
  const tessera_host_api* api = ctx.api();
  ASSERT_EQ(run_device(), ComputeDevice::cpu);
  void* p = api->mem_alloc(api->ctx, 100);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0U);
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(bytes[i], 0);
  tessera_device d{TESSERA_DEVICE_CUDA, 1};
  api->pointer_device(api->ctx, p, &d);
  EXPECT_EQ(d.type, TESSERA_DEVICE_CPU);
  api->mem_free(api->ctx, p, 100);
}

TEST(ComputeMemory, ACudaRunWithoutADeviceStopsBeforeItStarts) {
  if (device::cuda_built()) {
    try {
      (void)device::cuda_device_count();
      GTEST_SKIP() << "this machine has a CUDA device";
    } catch (const Error&) {
    }
  }
  try {
    const RunDeviceGuard guard(ComputeDevice::cuda);
    ADD_FAILURE() << "a CUDA run started without a device";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_UNSUPPORTED);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("run.device = \"cuda\": ", 0), 0U) << what;
    EXPECT_TRUE(what.find("no CUDA device (cudaGetDeviceCount: ") != std::string::npos ||
                what.find("built without the CUDA Toolkit") != std::string::npos)
        << what;
  }
  EXPECT_EQ(run_device(), ComputeDevice::cpu);
}

// A one-rank backend that takes CPU and CUDA buffers and keeps the last
// arguments it was given.
tessera_coll_args g_last{};
int32_t one_rank(const tessera_comm* /*comm*/) { return 0; }
int32_t one_size(const tessera_comm* /*comm*/) { return 1; }
tessera_status keep_args(tessera_comm* /*comm*/, const tessera_coll_args* args,
                         tessera_work** work) {
  g_last = *args;
  if (work != nullptr) *work = nullptr;
  return TESSERA_OK;
}

tessera_backend_api recording_backend(uint32_t caps) {
  tessera_backend_api api{};
  api.struct_size = sizeof api;
  api.capabilities = caps;
  api.comm_rank = &one_rank;
  api.comm_size = &one_size;
  api.post = &keep_args;
  return api;
}

TEST(ComputeMemory, CommViewHandsDeviceMemoryToACudaBackendAsCudaBuffers) {
  CudaHost host;
  const sdk::Host h(&host.api);
  const tessera_backend_api api =
      recording_backend(TESSERA_BACKEND_CAP_CPU_BUFFERS | TESSERA_BACKEND_CAP_CUDA_BUFFERS);
  auto* comm = reinterpret_cast<tessera_comm*>(&host);  // never dereferenced
  sdk::CommView view(h, &api, comm);
  sdk::TrackedBuffer<float> device_memory(h, 0, TESSERA_MEM_GRADS, 16);
  std::vector<float> host_memory(16);

  view.allreduce(device_memory.span());
  EXPECT_EQ(g_last.send.device.type, TESSERA_DEVICE_CUDA);
  EXPECT_EQ(g_last.recv.device.type, TESSERA_DEVICE_CUDA);
  EXPECT_EQ(g_last.recv.device.index, 3);

  view.allreduce(std::span<float>(host_memory));
  EXPECT_EQ(g_last.send.device.type, TESSERA_DEVICE_CPU);

  // One side ordinary host memory: both stay CPU buffers.
  view.run(sdk::CommView::args(TESSERA_COLL_ALLGATHER,
                               sdk::CommView::buffer(device_memory.span().first(8)),
                               sdk::CommView::buffer(std::span<float>(host_memory))));
  EXPECT_EQ(g_last.send.device.type, TESSERA_DEVICE_CPU);
  EXPECT_EQ(g_last.recv.device.type, TESSERA_DEVICE_CPU);

  view.send(std::span<const float>(device_memory.span()), 0, 1);
  EXPECT_EQ(g_last.send.device.type, TESSERA_DEVICE_CUDA);
}

TEST(ComputeMemory, CommViewKeepsCpuBuffersForABackendWithoutCuda) {
  CudaHost host;
  const sdk::Host h(&host.api);
  const tessera_backend_api api = recording_backend(TESSERA_BACKEND_CAP_CPU_BUFFERS);
  auto* comm = reinterpret_cast<tessera_comm*>(&host);
  sdk::CommView view(h, &api, comm);
  sdk::TrackedBuffer<float> device_memory(h, 0, TESSERA_MEM_GRADS, 16);
  view.allreduce(device_memory.span());
  EXPECT_EQ(g_last.send.device.type, TESSERA_DEVICE_CPU);
  EXPECT_EQ(g_last.recv.device.type, TESSERA_DEVICE_CPU);
}

}  // namespace
}  // namespace tessera::test

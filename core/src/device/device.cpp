// The run's compute device (see tessera/core/device.hpp).
#include "tessera/core/device.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "tessera/core/logging.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

std::atomic<ComputeDevice> g_device{ComputeDevice::cpu};
std::atomic<ComputePrecision> g_precision{ComputePrecision::f32};
std::atomic<int32_t> g_cuda_devices{0};

// LOCAL_RANK of this process, -1 when the environment sets none.
int32_t local_rank_of_process() noexcept {
  const char* text = std::getenv("LOCAL_RANK");  // NOLINT(concurrency-mt-unsafe): read-only use
  if (text == nullptr || *text == '\0') return -1;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' && value >= 0 && value < (1L << 30) ? static_cast<int32_t>(value) : -1;
}

}  // namespace

std::string_view compute_device_name(ComputeDevice device) noexcept {
  return device == ComputeDevice::cuda ? "cuda" : "cpu";
}

std::string_view compute_precision_name(ComputePrecision precision) noexcept {
  switch (precision) {
    case ComputePrecision::tf32:
      return "tf32";
    case ComputePrecision::bf16:
      return "bf16";
    case ComputePrecision::f16:
      return "f16";
    case ComputePrecision::f32:
      break;
  }
  return "f32";
}

ComputeDevice run_device() noexcept { return g_device.load(std::memory_order_relaxed); }

ComputePrecision run_precision() noexcept { return g_precision.load(std::memory_order_relaxed); }

int32_t rank_device_ordinal() noexcept {
  const int32_t count = g_cuda_devices.load(std::memory_order_relaxed);
  if (run_device() != ComputeDevice::cuda || count <= 0) return 0;
  static const int32_t local_rank = local_rank_of_process();
  const int32_t index = local_rank >= 0 ? local_rank : std::max(thread_rank(), 0);
  return index % count;
}

RunDeviceGuard::RunDeviceGuard(ComputeDevice device, ComputePrecision precision)
    : previous_(run_device()),
      previous_precision_(run_precision()),
      previous_count_(g_cuda_devices.load()) {
  int32_t count = 0;
  if (device == ComputeDevice::cuda) {
    try {
      count = device::cuda_device_count();
    } catch (const Error& e) {
      throw Error(e.status(), std::string("run.device = \"cuda\": ") + e.what());
    }
  }
  g_cuda_devices.store(count);
  g_device.store(device);
  g_precision.store(precision);
}

RunDeviceGuard::~RunDeviceGuard() {
  g_device.store(previous_);
  g_precision.store(previous_precision_);
  g_cuda_devices.store(previous_count_);
}

}  // namespace tessera

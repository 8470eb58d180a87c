// The device a run computes on (run.device) and the few CUDA runtime calls
// the host makes for it: counting devices, managed memory for the buffers
// strategies keep (tessera_host_api.mem_alloc), and telling which device a
// pointer lives on. device/cuda.cpp implements the CUDA part over the
// static CUDA runtime when the CUDA Toolkit was found at build time (so
// the host still starts where there is no driver); device/none.cpp
// otherwise, where every call that needs a device fails with "built
// without the CUDA Toolkit".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

namespace optim {
struct ElementwiseStep;
}  // namespace optim

enum class ComputeDevice { cpu, cuda };

// The precision of the models' matrix products (run.precision): f32, f32
// on TF32 tensor cores (inputs rounded to TF32's 10-bit mantissa), or
// bfloat16 or float16 inputs; every one accumulates in f32.
enum class ComputePrecision { f32, tf32, bf16, f16 };

// "cpu" | "cuda".
std::string_view compute_device_name(ComputeDevice device) noexcept;
// "f32" | "tf32" | "bf16" | "f16".
std::string_view compute_precision_name(ComputePrecision precision) noexcept;

// The device of the current run, what tessera_host_api.compute_device
// reports to every plugin of this process (CPU until a run sets it), and
// the CUDA devices it found then.
ComputeDevice run_device() noexcept;
ComputePrecision run_precision() noexcept;
// The CUDA ordinal of the calling rank on a CUDA run: its LOCAL_RANK when
// the environment sets one, else its rank in this process, modulo the
// devices present. 0 on a CPU run.
int32_t rank_device_ordinal() noexcept;

// Sets the run's device and precision for one scope (a run) and restores
// the previous ones at its end. For CUDA it first checks that a device is there: throws
// tessera::Error (unsupported) `run.device = "cuda": no CUDA device
// (cudaGetDeviceCount: <why>)`, or `... this tessera was built without the
// CUDA Toolkit`, before anything of the run is built.
class RunDeviceGuard {
 public:
  explicit RunDeviceGuard(ComputeDevice device, ComputePrecision precision = ComputePrecision::f32);
  RunDeviceGuard(const RunDeviceGuard&) = delete;
  RunDeviceGuard& operator=(const RunDeviceGuard&) = delete;
  ~RunDeviceGuard();

 private:
  ComputeDevice previous_;
  ComputePrecision previous_precision_;
  int32_t previous_count_;
};

namespace device {

// Whether this host was built with the CUDA Toolkit.
bool cuda_built() noexcept;
// The CUDA devices present (> 0); throws tessera::Error (unsupported)
// "no CUDA device (cudaGetDeviceCount: <why>)" or "this tessera was built
// without the CUDA Toolkit".
int32_t cuda_device_count();
// `bytes` of zeroed CUDA managed memory associated with device `ordinal`;
// nullptr with `error` set when the runtime refuses.
void* managed_alloc(int32_t ordinal, std::size_t bytes, std::string& error) noexcept;
// Frees what managed_alloc returned.
void managed_free(void* ptr) noexcept;
// Whether `ptr` is CUDA device or managed memory, and of which device.
bool cuda_pointer(const void* ptr, int32_t& ordinal) noexcept;

// Element-wise f32 work on CUDA memory, so that a CUDA run's per-step passes
// over parameters, gradients and optimizer state (zeroing, clipping, the
// optimizer) run where those buffers are instead of moving every page to
// the host and back (device/cuda_kernels.cu). Each runs on the calling
// thread's per-thread stream and is done when it returns. Each returns
// false and does nothing where it does not apply: not a CUDA run, a
// pointer that is not CUDA memory (all of them of one device), or a host
// built without the kernels (no nvcc, or a sanitizer build); the caller
// then does the work on the CPU. A CUDA error throws tessera::Error
// (internal) naming the call and the runtime's error.
//
// x[i] = value.
bool fill_on_cuda(float* x, std::size_t count, float value);
// x[i] *= factor.
bool scale_on_cuda(float* x, std::size_t count, float factor);
// out = Σ x[i]² in double, in an order fixed by `count` alone (the same
// sum on every call with the same values).
bool sum_squares_on_cuda(const float* x, std::size_t count, double& out);
// The optimizer update (tessera/core/optim/elementwise.hpp) of `count`
// elements; s0 and s1 are the rule's state slots (null where the rule has
// none).
bool optimizer_step_on_cuda(const optim::ElementwiseStep& step, float* params, const float* grads,
                            float* s0, float* s1, std::size_t count);

}  // namespace device
}  // namespace tessera

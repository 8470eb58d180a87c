// The element-wise work of tessera/core/device.hpp (fill_on_cuda and the
// rest) over the host's own kernels (cuda_kernels.cu), compiled with them
// when nvcc is found and the build is not a sanitizer build
// (core/CMakeLists.txt); no_kernels.cpp otherwise.
#include <cuda_runtime.h>

#include <initializer_list>
#include <string>

#include "cuda_kernels.hpp"
#include "tessera/core/device.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::device {
namespace {

// The CUDA device every non-null pointer of `ptrs` lives on, or -1 when one
// is not CUDA memory or they are on different devices.
int32_t common_cuda_device(std::initializer_list<const void*> ptrs) noexcept {
  int32_t device = -1;
  for (const void* ptr : ptrs) {
    if (ptr == nullptr) continue;
    int32_t ordinal = -1;
    if (!cuda_pointer(ptr, ordinal) || (device >= 0 && ordinal != device)) return -1;
    device = ordinal;
  }
  return device;
}

// The device `ptrs` share when this is a CUDA run and there is work, else -1.
int32_t work_device(std::size_t count, std::initializer_list<const void*> ptrs) noexcept {
  if (count == 0 || run_device() != ComputeDevice::cuda) return -1;
  return common_cuda_device(ptrs);
}

void check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  throw Error(TESSERA_ERR_INTERNAL, std::string(what) + " on CUDA: " + cudaGetErrorName(err) +
                                        ": " + cudaGetErrorString(err));
}

// Queues `launch(stream)` on the calling thread's stream of device
// `ordinal` and waits for it.
template <typename Launch>
void run_on(int32_t ordinal, const char* what, const Launch& launch) {
  check_cuda(cudaSetDevice(ordinal), what);
  check_cuda(launch(cudaStreamPerThread), what);
  check_cuda(cudaStreamSynchronize(cudaStreamPerThread), what);
}

// Runs `launch` on the device `ptrs` share (see run_on) and returns true,
// or returns false, doing nothing, when the work is not for a device
// (work_device).
template <typename Launch>
bool run_where(std::size_t count, std::initializer_list<const void*> ptrs, const char* what,
               const Launch& launch) {
  const int32_t ordinal = work_device(count, ptrs);
  if (ordinal < 0) return false;
  run_on(ordinal, what, launch);
  return true;
}

}  // namespace

bool fill_on_cuda(float* x, std::size_t count, float value) {
  return run_where(count, {x}, "fill",
                   [&](cudaStream_t stream) { return kernels::fill(x, count, value, stream); });
}

bool scale_on_cuda(float* x, std::size_t count, float factor) {
  return run_where(count, {x}, "scale",
                   [&](cudaStream_t stream) { return kernels::scale(x, count, factor, stream); });
}

bool sum_squares_on_cuda(const float* x, std::size_t count, double& out) {
  return run_where(count, {x}, "sum of squares", [&](cudaStream_t stream) {
    // The partial sums and the total, in the stream-ordered pool.
    void* scratch = nullptr;
    cudaError_t err =
        cudaMallocAsync(&scratch, (kernels::kSumSquaresPartials + 1) * sizeof(double), stream);
    if (err != cudaSuccess) return err;
    auto* partials = static_cast<double*>(scratch);
    double* total = partials + kernels::kSumSquaresPartials;
    err = kernels::sum_squares(x, count, partials, total, stream);
    if (err == cudaSuccess) {
      err = cudaMemcpyAsync(&out, total, sizeof(double), cudaMemcpyDeviceToHost, stream);
    }
    const cudaError_t freed = cudaFreeAsync(scratch, stream);
    return err != cudaSuccess ? err : freed;
  });
}

bool optimizer_step_on_cuda(const optim::ElementwiseStep& step, float* params, const float* grads,
                            float* s0, float* s1, std::size_t count) {
  return run_where(count, {params, grads, s0, s1}, "optimizer step", [&](cudaStream_t stream) {
    return kernels::optimizer_step(step, params, grads, s0, s1, count, stream);
  });
}

}  // namespace tessera::device

// The host's own CUDA kernels (cuda_kernels.cu), launched by device/cuda_work.cpp
// on `stream`; each returns the launch's error (cudaSuccess when queued).
// Every pointer is CUDA device or managed memory of the current device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tessera/core/optim/elementwise.hpp"

namespace tessera::device::kernels {

cudaError_t fill(float* x, uint64_t count, float value, cudaStream_t stream);
cudaError_t scale(float* x, uint64_t count, float factor, cudaStream_t stream);
// Σ x[i]² into *out (device memory), through `partials` (device memory of
// kSumSquaresPartials doubles); the order depends on `count` alone.
inline constexpr uint32_t kSumSquaresPartials = 512;
cudaError_t sum_squares(const float* x, uint64_t count, double* partials, double* out,
                        cudaStream_t stream);
cudaError_t optimizer_step(const optim::ElementwiseStep& step, float* params, const float* grads,
                           float* s0, float* s1, uint64_t count, cudaStream_t stream);

}  // namespace tessera::device::kernels

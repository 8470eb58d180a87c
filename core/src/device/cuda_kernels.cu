// The host's own CUDA kernels (cuda_kernels.hpp): element-wise passes over
// the strategies' buffers and the optimizers' update. Compiled with
// -fmad=false (core/CMakeLists.txt) so the update rounds exactly as the CPU
// loop does (tessera/core/optim/elementwise.hpp).
#include "cuda_kernels.hpp"

namespace tessera::device::kernels {
namespace {

constexpr uint32_t kThreads = 256;
// Blocks of a grid-stride element-wise launch: enough to fill a large GPU,
// no more than the elements need.
uint32_t blocks_for(uint64_t count) {
  const uint64_t needed = (count + kThreads - 1) / kThreads;
  return static_cast<uint32_t>(needed < 4096 ? (needed > 0 ? needed : 1) : 4096);
}

__global__ void fill_kernel(float* x, uint64_t count, float value) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    x[i] = value;
  }
}

__global__ void scale_kernel(float* x, uint64_t count, float factor) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    x[i] *= factor;
  }
}

// Sums `value` over the block's threads in a fixed tree order; thread 0
// gets the total.
__device__ double block_sum(double value) {
  __shared__ double shared[kThreads];
  shared[threadIdx.x] = value;
  __syncthreads();
  for (uint32_t half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  return shared[0];
}

// Block b sums the squares of elements b*kThreads + t + k*stride.
__global__ void sum_squares_partial(const float* x, uint64_t count, double* partials) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  double acc = 0.0;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const double d = static_cast<double>(x[i]);
    acc += d * d;
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void sum_partials(const double* partials, uint32_t count, double* out) {
  double acc = 0.0;
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  const double total = block_sum(acc);
  if (threadIdx.x == 0) *out = total;
}

template <optim::Rule R>
__global__ void optimizer_kernel(optim::ElementwiseStep step, float* p, const float* g, float* s0,
                                 float* s1, uint64_t count) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    optim::update_element<R>(step, p, g, s0, s1, i);
  }
}

}  // namespace

cudaError_t fill(float* x, uint64_t count, float value, cudaStream_t stream) {
  fill_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, count, value);
  return cudaGetLastError();
}

cudaError_t scale(float* x, uint64_t count, float factor, cudaStream_t stream) {
  scale_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, count, factor);
  return cudaGetLastError();
}

cudaError_t sum_squares(const float* x, uint64_t count, double* partials, double* out,
                        cudaStream_t stream) {
  const uint32_t blocks =
      blocks_for(count) < kSumSquaresPartials ? blocks_for(count) : kSumSquaresPartials;
  sum_squares_partial<<<blocks, kThreads, 0, stream>>>(x, count, partials);
  sum_partials<<<1, kThreads, 0, stream>>>(partials, blocks, out);
  return cudaGetLastError();
}

cudaError_t optimizer_step(const optim::ElementwiseStep& step, float* params, const float* grads,
                           float* s0, float* s1, uint64_t count, cudaStream_t stream) {
  const uint32_t blocks = blocks_for(count);
  switch (step.rule) {
    case optim::Rule::sgd:
      optimizer_kernel<optim::Rule::sgd>
          <<<blocks, kThreads, 0, stream>>>(step, params, grads, s0, s1, count);
      break;
    case optim::Rule::momentum:
      optimizer_kernel<optim::Rule::momentum>
          <<<blocks, kThreads, 0, stream>>>(step, params, grads, s0, s1, count);
      break;
    case optim::Rule::adam:
      optimizer_kernel<optim::Rule::adam>
          <<<blocks, kThreads, 0, stream>>>(step, params, grads, s0, s1, count);
      break;
  }
  return cudaGetLastError();
}

}  // namespace tessera::device::kernels

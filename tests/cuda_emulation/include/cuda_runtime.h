// A stand-in for the CUDA runtime header under which the CUDA units'
// kernels (plugins/models/common/cuda/device_kernels.cu) compile as host
// C++ and run on CPU threads: the emulation of tests/model/cuda_emulation.
// Only what those kernels use: the launch (see emulation.hpp), thread and
// block indices, __syncthreads, shared memory, dim3 and a stream type.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

struct CUstream_st;
using cudaStream_t = CUstream_st*;

struct dim3 {
  unsigned x = 1;
  unsigned y = 1;
  unsigned z = 1;
  // NOLINTNEXTLINE(google-explicit-constructor): CUDA's dim3 converts implicitly
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct uint3 {
  unsigned x = 0;
  unsigned y = 0;
  unsigned z = 0;
};

namespace tessera::emu {
// The calling emulated thread's indices and the running launch's shape.
inline thread_local uint3 thread_idx;
inline thread_local uint3 block_idx;
inline thread_local dim3 block_dim;
inline thread_local dim3 grid_dim;
// Waits for every thread of the calling thread's block.
void sync_block();
// The running launch's dynamic shared memory (its third launch argument).
float* dynamic_shared();
}  // namespace tessera::emu

#define threadIdx (::tessera::emu::thread_idx)
#define blockIdx (::tessera::emu::block_idx)
#define blockDim (::tessera::emu::block_dim)
#define gridDim (::tessera::emu::grid_dim)
#define __global__
#define __device__
#define __host__
// A block's shared arrays: blocks run one after another, so one static
// array serves every block of a launch.
#define __shared__ static

inline void __syncthreads() { ::tessera::emu::sync_block(); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

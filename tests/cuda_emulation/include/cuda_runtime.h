// A stand-in for the CUDA runtime header under which the CUDA units'
// kernels (plugins/models/common/cuda/device_kernels.cu) compile as host
// C++ and run on CPU threads: the emulation of tests/model/cuda_emulation.
// Only what those kernels use: the launch (see emulation.hpp), thread and
// block indices, __syncthreads, shared memory and its opt-in, dim3, a
// stream type, and the launch's error (cudaGetLastError).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

struct CUstream_st;
using cudaStream_t = CUstream_st*;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3
};
struct cudaPointerAttributes {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = 0;
};
enum cudaDeviceAttr {
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
  cudaDevAttrMemoryPoolsSupported = 115
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
struct CUmemPoolHandle_st;
using cudaMemPool_t = CUmemPoolHandle_st*;
inline constexpr unsigned cudaStreamNonBlocking = 1;
inline constexpr unsigned cudaMemAttachGlobal = 1;
inline cudaStream_t const cudaStreamPerThread = reinterpret_cast<cudaStream_t>(0x2);

const char* cudaGetErrorName(cudaError_t err);
const char* cudaGetErrorString(cudaError_t err);
cudaError_t cudaGetLastError();
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaMallocManaged(void** ptr, size_t bytes, unsigned flags = cudaMemAttachGlobal);
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream);
cudaError_t cudaMemcpy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* to, const void* from, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemcpy2DAsync(void* to, size_t to_pitch, const void* from, size_t from_pitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr);
cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value);

// The runtime's typed overloads of its C calls.
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
template <typename T>
cudaError_t cudaMallocManaged(T** ptr, size_t bytes, unsigned flags = cudaMemAttachGlobal) {
  return cudaMallocManaged(reinterpret_cast<void**>(ptr), bytes, flags);
}
template <typename T>
cudaError_t cudaMallocAsync(T** ptr, size_t bytes, cudaStream_t stream) {
  return cudaMallocAsync(reinterpret_cast<void**>(ptr), bytes, stream);
}
template <typename T>
cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

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
// Bytes of the emulation's "device" memory (cudaMalloc and
// cudaMallocAsync) not yet freed, and of its managed memory.
size_t device_bytes_in_use();
size_t managed_bytes_in_use();
// Waits for every thread of the calling thread's block.
void sync_block();
// The running launch's dynamic shared memory (its third launch argument).
float* dynamic_shared();
// The calling thread's error of its last refused launch, cleared by the
// reading (cudaGetLastError).
cudaError_t take_last_error();
// The dynamic shared memory one block may have once its kernel asks
// (cudaDevAttrMaxSharedMemoryPerBlockOptin); 227 KiB as on an H100 unless
// a test sets it.
size_t shared_optin_bytes();
void set_shared_optin_bytes(size_t bytes);
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
cudaError_t set_max_dynamic_shared(const void* kernel, size_t bytes);
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

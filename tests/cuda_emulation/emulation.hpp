// The launch of the kernel emulation (see include/cuda_runtime.h): the
// CUDA units' kernel source, rewritten at configure time so that
// `k<<<grid, block, shared, stream>>>(args)` reads
// `::tessera::emu::launch(k)(grid, block, shared, stream)(args)`, runs on
// CPU threads. The blocks of a launch run one after another; the threads
// of a block are blockDim.x·y·z real threads meeting at a barrier for
// every __syncthreads, so a kernel that reads shared memory another thread
// writes without a barrier between is a data race ThreadSanitizer reports.
// The launch returns once every block is done (a synchronous stream); one
// launch runs at a time, whichever thread starts it. A launch a device
// would refuse (more than 1024 threads a block, a grid's y or z past
// 65535, more dynamic shared memory than its kernel may have: 48 KiB, or
// what cudaFuncSetAttribute allowed it) does not run: cudaGetLastError
// answers cudaErrorInvalidConfiguration, as on a device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <tuple>
#include <utility>

namespace tessera::emu {

// Runs `body` (a launch of `kernel`) once per thread of every block of
// `grid`, with `shared_bytes` of dynamic shared memory per block.
void run_grid(const void* kernel, dim3 grid, dim3 block, std::size_t shared_bytes,
              const std::function<void()>& body);

// How many launches ran since the process started (a test's check that a
// host wrapper launched at all).
std::size_t launches();

// Runs every block with at most `threads` threads (a power of two; 0: as
// launched) from here on; with 1, the blocks run one after another in the
// calling thread. The kernels loop over blockDim and gridDim (grid-stride
// loops) and size their reductions by blockDim, so fewer threads compute
// the same; a whole model's passes run many times faster so, the kernels'
// own tests keeping the launched 256 threads and their barriers (64 in a
// sanitizer build, which caps every block there; see emulation.cpp).
void limit_block_threads(unsigned threads);

// Refuses the calling thread's next launch, as a device refuses a launch
// beyond its limits (a test of the launch checks).
void refuse_next_launch();

// limit_block_threads(threads) for a scope; as launched after it.
class BlockThreadLimit {
 public:
  explicit BlockThreadLimit(unsigned threads) { limit_block_threads(threads); }
  BlockThreadLimit(const BlockThreadLimit&) = delete;
  BlockThreadLimit& operator=(const BlockThreadLimit&) = delete;
  ~BlockThreadLimit() { limit_block_threads(0); }
};

template <typename... Params>
class Launch {
 public:
  explicit Launch(void (*kernel)(Params...)) : kernel_(kernel) {}
  // The launch configuration; the stream is ignored (every launch is
  // synchronous).
  auto operator()(dim3 grid, dim3 block, std::size_t shared = 0,
                  cudaStream_t /*stream*/ = nullptr) const {
    return [kernel = kernel_, grid, block, shared](auto&&... args) {
      const std::tuple<Params...> params(std::forward<decltype(args)>(args)...);
      // Each thread gets its own copies of the parameters, as on a device.
      run_grid(reinterpret_cast<const void*>(kernel), grid, block, shared,
               [&] { std::apply(kernel, params); });
    };
  }

 private:
  void (*kernel_)(Params...);
};

template <typename... Params>
Launch<Params...> launch(void (*kernel)(Params...)) {
  return Launch<Params...>(kernel);
}

// set_shared_optin_bytes(bytes) for a scope; the default after it.
class SharedOptin {
 public:
  explicit SharedOptin(std::size_t bytes) { set_shared_optin_bytes(bytes); }
  SharedOptin(const SharedOptin&) = delete;
  SharedOptin& operator=(const SharedOptin&) = delete;
  ~SharedOptin() { set_shared_optin_bytes(0); }
};

}  // namespace tessera::emu

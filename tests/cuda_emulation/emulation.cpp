// The kernel emulation's grid runner (see emulation.hpp).
#include "emulation.hpp"

#include <atomic>
#include <barrier>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace tessera::emu {
namespace {

thread_local std::barrier<>* t_block_barrier = nullptr;
std::vector<float> g_shared;  // the running launch's dynamic shared memory
std::atomic<std::size_t> g_launches{0};
std::atomic<unsigned> g_thread_limit{0};
// The most threads a block runs with unless a test asks for fewer: as
// launched in a plain build; 64 under a sanitizer, where each thread and
// each barrier crossing costs many times more and 256 threads a block made
// these tests the largest part of the sanitizer trees' test time. 64
// threads still meet at every barrier (a missing __syncthreads is still a
// race) and still make two lanes of the column sums.
#ifdef TESSERA_TEST_SANITIZED
constexpr unsigned kBlockThreadCap = 64;
#else
constexpr unsigned kBlockThreadCap = 0;
#endif
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local bool t_refuse_next = false;
constexpr std::size_t kDefaultShared = 48 * 1024;
constexpr std::size_t kH100Optin = 227 * 1024;
std::atomic<std::size_t> g_optin{0};  // 0: kH100Optin
std::mutex g_kernel_mutex;
std::map<const void*, std::size_t> g_max_shared;  // by kernel, where raised

std::size_t max_shared_of(const void* kernel) {
  const std::lock_guard<std::mutex> lock(g_kernel_mutex);
  const auto it = g_max_shared.find(kernel);
  return it == g_max_shared.end() ? kDefaultShared : it->second;
}

// Whether a device would launch this configuration.
bool launchable(const void* kernel, dim3 grid, dim3 block, std::size_t shared_bytes) {
  const auto threads = std::uint64_t{block.x} * block.y * block.z;
  return threads >= 1 && threads <= 1024 && block.z <= 64 && grid.x >= 1 && grid.y >= 1 &&
         grid.z >= 1 && grid.x <= 2147483647U && grid.y <= 65535 && grid.z <= 65535 &&
         shared_bytes <= max_shared_of(kernel);
}

// Thread `t` of every block of `grid` in turn, on the calling thread, each
// block's run ending at `barrier` (all of the block's threads meet there
// before the next block reuses the shared arrays).
void run_thread(dim3 grid, dim3 block, uint3 t, std::barrier<>& barrier,
                const std::function<void()>& body) {
  t_block_barrier = &barrier;
  thread_idx = t;
  block_dim = block;
  grid_dim = grid;
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        block_idx = {bx, by, bz};
        body();
        barrier.arrive_and_wait();
      }
    }
  }
  t_block_barrier = nullptr;
}

}  // namespace

void sync_block() { t_block_barrier->arrive_and_wait(); }

float* dynamic_shared() { return g_shared.data(); }

cudaError_t take_last_error() { return std::exchange(t_last_error, cudaSuccess); }

std::size_t shared_optin_bytes() {
  const std::size_t bytes = g_optin.load();
  return bytes > 0 ? bytes : kH100Optin;
}

void set_shared_optin_bytes(std::size_t bytes) { g_optin.store(bytes); }

cudaError_t set_max_dynamic_shared(const void* kernel, std::size_t bytes) {
  if (bytes > shared_optin_bytes()) return cudaErrorInvalidValue;
  const std::lock_guard<std::mutex> lock(g_kernel_mutex);
  g_max_shared[kernel] = bytes;
  return cudaSuccess;
}

std::size_t launches() { return g_launches.load(); }

void refuse_next_launch() { t_refuse_next = true; }

void limit_block_threads(unsigned threads) { g_thread_limit.store(threads); }

void run_grid(const void* kernel, dim3 grid, dim3 block, std::size_t shared_bytes,
              const std::function<void()>& body) {
  if (std::exchange(t_refuse_next, false) || !launchable(kernel, grid, block, shared_bytes)) {
    t_last_error = cudaErrorInvalidConfiguration;
    return;
  }
  // One launch at a time: the shared arrays are the process's (ranks as
  // threads launch at once in the tensor-parallel checks).
  static std::mutex launch_mutex;
  const std::lock_guard<std::mutex> lock(launch_mutex);
  g_launches.fetch_add(1);
  g_shared.assign((shared_bytes + sizeof(float) - 1) / sizeof(float) + 1, 0.0f);
  unsigned limit = g_thread_limit.load();
  if (kBlockThreadCap > 0 && (limit == 0 || limit > kBlockThreadCap)) limit = kBlockThreadCap;
  if (limit > 0 && block.y == 1 && block.z == 1 && block.x > limit) block.x = limit;
  const auto threads = static_cast<std::ptrdiff_t>(block.x) * block.y * block.z;
  std::barrier<> barrier(threads);
  if (threads == 1) {
    // One thread per block: every block in the calling thread, in order.
    run_thread(grid, block, {0, 0, 0}, barrier, body);
    return;
  }
  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(threads));
  for (unsigned tz = 0; tz < block.z; ++tz) {
    for (unsigned ty = 0; ty < block.y; ++ty) {
      for (unsigned tx = 0; tx < block.x; ++tx) {
        workers.emplace_back([&, tx, ty, tz] {
          run_thread(grid, block, {tx, ty, tz}, barrier, body);
        });
      }
    }
  }
  for (std::thread& w : workers) w.join();
}

}  // namespace tessera::emu

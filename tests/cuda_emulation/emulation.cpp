// The kernel emulation's grid runner (see emulation.hpp).
#include "emulation.hpp"

#include <atomic>
#include <barrier>
#include <cstdint>
#include <thread>
#include <vector>

namespace tessera::emu {
namespace {

thread_local std::barrier<>* t_block_barrier = nullptr;
std::vector<float> g_shared;  // the running launch's dynamic shared memory
std::atomic<std::size_t> g_launches{0};

}  // namespace

void sync_block() { t_block_barrier->arrive_and_wait(); }

float* dynamic_shared() { return g_shared.data(); }

std::size_t launches() { return g_launches.load(); }

void run_grid(dim3 grid, dim3 block, std::size_t shared_bytes, const std::function<void()>& body) {
  g_launches.fetch_add(1);
  g_shared.assign((shared_bytes + sizeof(float) - 1) / sizeof(float) + 1, 0.0f);
  const auto threads = static_cast<std::ptrdiff_t>(block.x) * block.y * block.z;
  std::barrier<> barrier(threads);
  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(threads));
  for (unsigned tz = 0; tz < block.z; ++tz) {
    for (unsigned ty = 0; ty < block.y; ++ty) {
      for (unsigned tx = 0; tx < block.x; ++tx) {
        workers.emplace_back([&, tx, ty, tz] {
          t_block_barrier = &barrier;
          thread_idx = {tx, ty, tz};
          block_dim = block;
          grid_dim = grid;
          for (unsigned bz = 0; bz < grid.z; ++bz) {
            for (unsigned by = 0; by < grid.y; ++by) {
              for (unsigned bx = 0; bx < grid.x; ++bx) {
                block_idx = {bx, by, bz};
                body();
                // The whole block is done before the next one reuses the
                // shared arrays.
                barrier.arrive_and_wait();
              }
            }
          }
          t_block_barrier = nullptr;
        });
      }
    }
  }
  for (std::thread& w : workers) w.join();
}

}  // namespace tessera::emu

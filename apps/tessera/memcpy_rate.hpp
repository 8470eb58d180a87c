// The machine's single-thread memcpy rate, the yardstick printed next to the
// collective benchmark's bus bandwidth.
#pragma once

#include <cstdint>

namespace tessera::cli {

struct MemcpyRate {
  uint64_t bytes = 0;   // buffer size copied
  int repetitions = 0;  // timed repetitions; the best one is reported
  uint64_t copies_per_rep = 0;
  double gb_per_s = 0.0;  // bytes copied / second / 1e9 (best repetition)
};

// Copies a `bytes`-sized buffer into another with std::memcpy on the calling
// thread. Both buffers are written first so their pages are mapped; then
// `repetitions` timed runs each copy the buffer enough times to move at least
// 64 MiB (one copy for large buffers). Returns the best rate. `bytes` and
// `repetitions` must be >= 1 (throws tessera::Error otherwise); allocation
// failure throws std::bad_alloc.
MemcpyRate measure_memcpy_rate(uint64_t bytes, int repetitions = 5);

}  // namespace tessera::cli

// The benchmark's buffers on the device chosen by `bench collectives
// --device`: host memory, or CUDA memory with a host copy through which the
// pattern is written and the result read back (outside the timed loops).
// Also the small bookkeeping exchanges (times, mismatch counts) done on the
// same kind of memory, so a backend that takes only device buffers runs
// them too.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "aligned_buffer.hpp"
#include "bench_device.hpp"
#include "tessera/c/common.h"
#include "tessera/core/comm.hpp"

namespace tessera::cli {

// Parses a --device value ("cpu", "cuda"); nullopt if unknown.
std::optional<tessera_device_type> parse_bench_device(std::string_view name);
// The values --device accepts, for messages.
std::string bench_device_list();
// "cpu", or "cuda:<ordinal>".
std::string device_text(const tessera_device& device);

// The CUDA device of this process's ranks: LOCAL_RANK (`local_rank`, null
// when unset) or 0. Throws UsageError for a value that is not an integer in
// 0..4095.
int32_t bench_cuda_ordinal(const char* local_rank);

// The device of `--device cuda` for this process: checks that a device can
// be used (see cuda_device_count) and that the ordinal of `local_rank` (as
// for bench_cuda_ordinal) is below the device count, else throws
// Error(INVALID_ARGUMENT) naming both.
tessera_device bench_cuda_device(const char* local_rank);

// `count` elements of `dtype` on `device`, zeroed. On the host the host copy
// is the buffer itself and to_device/to_host do nothing.
class BenchBuffer {
 public:
  BenchBuffer() = default;
  BenchBuffer(const tessera_device& device, uint64_t count, tessera_dtype dtype);

  // The host copy: write the input here before to_device, read the result
  // here after to_host.
  [[nodiscard]] std::byte* host() noexcept { return host_.data(); }
  [[nodiscard]] const std::byte* host() const noexcept { return host_.data(); }
  // The view the collectives get (device memory for CUDA).
  [[nodiscard]] const tessera_buffer& view() const noexcept { return view_; }

  void to_device();
  void to_host();

 private:
  AlignedBuffer host_;
  CudaMemory device_;
  tessera_buffer view_{};
};

// Every rank's `local` values, rank by rank into `all` (all.size() =
// local.size() x ranks), through `comm`'s allgather on `device` memory.
void allgather_values(Communicator& comm, const tessera_device& device,
                      std::span<const double> local, std::span<double> all);

// The sum over the ranks of `local`, through `comm`'s allreduce on `device`
// memory.
int64_t sum_over_ranks(Communicator& comm, const tessera_device& device, int64_t local);

}  // namespace tessera::cli

#include "memcpy_rate.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "aligned_buffer.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {

MemcpyRate measure_memcpy_rate(uint64_t bytes, int repetitions) {
  TESSERA_CHECK(bytes >= 1 && repetitions >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                "memcpy rate: need bytes >= 1 and repetitions >= 1, got ", bytes, " and ",
                repetitions);
  constexpr uint64_t kMinBytesPerRep = uint64_t{64} << 20;
  AlignedBuffer src(bytes);
  AlignedBuffer dst(bytes);
  src.touch(0x5a);
  dst.touch(0);

  MemcpyRate rate;
  rate.bytes = bytes;
  rate.repetitions = repetitions;
  rate.copies_per_rep = std::max<uint64_t>(1, kMinBytesPerRep / bytes);
  double best_s = 0.0;
  unsigned checksum = 0;
  for (int rep = 0; rep < repetitions; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t c = 0; c < rate.copies_per_rep; ++c) {
      std::memcpy(dst.data(), src.data(), bytes);
      // Reading the destination keeps each copy observable.
      checksum += static_cast<unsigned>(dst.data()[c % bytes]);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep == 0 || s < best_s) best_s = s;
  }
  TESSERA_CHECK(checksum == 0x5aU * static_cast<unsigned>(repetitions * rate.copies_per_rep),
                TESSERA_ERR_INTERNAL, "memcpy rate: copied data does not match its source");
  const double moved = static_cast<double>(bytes) * static_cast<double>(rate.copies_per_rep);
  rate.gb_per_s = best_s > 0.0 ? moved / best_s / 1e9 : 0.0;
  return rate;
}

}  // namespace tessera::cli

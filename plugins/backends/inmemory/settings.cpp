#include "settings.hpp"

#include "tessera/sdk/error.hpp"

namespace tessera::inmemory {

Settings Settings::from(const sdk::Options& options, const tessera_backend_config& config) {
  Settings s;
  const int64_t block_kb = options.get_int("block_kb");
  TESSERA_CHECK(block_kb >= 1 && block_kb <= 65536, TESSERA_ERR_INVALID_ARGUMENT,
                "inmemory option block_kb must be in 1..65536, got ", block_kb);
  s.block_bytes = static_cast<size_t>(block_kb) << 10;
  const int64_t stream_kb = options.get_int("stream_kb");
  TESSERA_CHECK(stream_kb >= 0 && stream_kb <= (int64_t{1} << 40), TESSERA_ERR_INVALID_ARGUMENT,
                "inmemory option stream_kb must be >= 0, got ", stream_kb);
  s.stream_bytes = static_cast<uint64_t>(stream_kb) << 10;
  const int64_t spin_us = options.get_int("spin_us");
  TESSERA_CHECK(spin_us >= 0 && spin_us <= 1000000, TESSERA_ERR_INVALID_ARGUMENT,
                "inmemory option spin_us must be in 0..1000000, got ", spin_us);
  s.spin = std::chrono::microseconds(spin_us);
  TESSERA_CHECK(config.world_size >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                "inmemory needs world_size >= 1 (ranks are threads of this process), got ",
                config.world_size);
  s.world_size = config.world_size;
  TESSERA_CHECK(config.timeout_ms != 0, TESSERA_ERR_INVALID_ARGUMENT,
                "inmemory: timeout_ms must be > 0 (or < 0 for none), got 0");
  s.timeout_ms = config.timeout_ms;
  return s;
}

}  // namespace tessera::inmemory

#include "settings.hpp"

#include "tessera/sdk/error.hpp"

namespace tessera::mpi {
namespace {

// Reads integer option `key` and checks lo <= value <= hi.
int64_t int_in_range(const sdk::Options& options, const char* key, int64_t lo, int64_t hi) {
  const int64_t v = options.get_int(key);
  TESSERA_CHECK(v >= lo && v <= hi, TESSERA_ERR_INVALID_ARGUMENT, "mpi option ", key,
                " must be in ", lo, "..", hi, ", got ", v);
  return v;
}

// Reads a wait in milliseconds (`key`): negative waits forever, and the
// bound keeps a deadline from overflowing.
int64_t wait_ms(const sdk::Options& options, const char* key) {
  const int64_t v = options.get_int(key);
  TESSERA_CHECK(v <= 604800000, TESSERA_ERR_INVALID_ARGUMENT, "mpi option ", key,
                " must be at most 604800000 (7 days; < 0 waits forever), got ", v);
  return v;
}

}  // namespace

Settings Settings::from(const sdk::Options& options, const tessera_backend_config& config) {
  Settings s;
  s.spin = std::chrono::microseconds(int_in_range(options, "spin_us", 0, 1000000));
  s.yield = std::chrono::microseconds(int_in_range(options, "yield_us", 0, 10000000));
  s.max_sleep = std::chrono::microseconds(int_in_range(options, "max_sleep_us", 50, 100000));
  s.service_poll = std::chrono::milliseconds(int_in_range(options, "service_poll_ms", 1, 1000));
  s.stall_query = std::chrono::milliseconds(int_in_range(options, "stall_query_ms", 0, 60000));
  s.chunk_elements = static_cast<uint64_t>(int_in_range(options, "chunk_elements", 1, 2147483647));
  s.iallreduce_algorithm =
      static_cast<int32_t>(int_in_range(options, "iallreduce_algorithm", 0, 4));
  s.finalize = options.get_bool("finalize");
  s.init_timeout_ms = wait_ms(options, "init_timeout_ms");
  s.finalize_wait_ms = wait_ms(options, "finalize_wait_ms");
  TESSERA_CHECK(config.world_size == -1 || config.world_size >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                "mpi: world_size must be -1 (take it from mpirun) or >= 1, got ",
                config.world_size);
  s.world_size = config.world_size;
  TESSERA_CHECK(config.timeout_ms != 0, TESSERA_ERR_INVALID_ARGUMENT,
                "mpi: timeout_ms must be > 0 (or < 0 for none), got 0");
  s.timeout_ms = config.timeout_ms;
  return s;
}

}  // namespace tessera::mpi

#include "reference.hpp"

#include <algorithm>

namespace tessera::conformance {
namespace {

// Largest magnitude of a sum/avg input such that the sum over `size` ranks
// stays below 256 (exact in bf16 and u8).
int64_t sum_magnitude_bound(int size) noexcept {
  return std::clamp<int64_t>(250 / std::max(size, 1), 1, 7);
}

int64_t integer_sum_input(tessera_dtype dtype, int size, int rank, uint64_t index) noexcept {
  const auto r = static_cast<uint64_t>(rank);
  const auto magnitude =
      1 + static_cast<int64_t>((index + 3 * r) % static_cast<uint64_t>(sum_magnitude_bound(size)));
  const bool negative = dtype != TESSERA_U8 && (index + r) % 3 == 1;
  return negative ? -magnitude : magnitude;
}

int64_t float_avg_input(int size, int rank, uint64_t index) noexcept {
  const auto base = static_cast<int64_t>(index % 5) - 2;
  const auto spread =
      static_cast<int64_t>((static_cast<uint64_t>(rank) + index) % static_cast<uint64_t>(size));
  return base + 2 * spread;
}

int64_t extremum_input(tessera_dtype dtype, int rank, uint64_t index) noexcept {
  const auto v = static_cast<int64_t>((index % 11 * 7 + static_cast<uint64_t>(rank) * 3) % 11);
  return dtype == TESSERA_U8 ? v * 23 : v - 5;
}

int64_t product_input(tessera_dtype dtype, int rank, uint64_t index) noexcept {
  const auto r = static_cast<uint64_t>(rank);
  const int64_t magnitude = (rank < 4 && (index + r) % 3 == 0) ? 2 : 1;
  const bool negative = dtype != TESSERA_U8 && (index + 2 * r) % 5 == 0;
  return negative ? -magnitude : magnitude;
}

}  // namespace

bool is_floating(tessera_dtype dtype) noexcept {
  return dtype == TESSERA_F32 || dtype == TESSERA_F64 || dtype == TESSERA_F16 ||
         dtype == TESSERA_BF16;
}

double unit_roundoff(tessera_dtype dtype) noexcept {
  switch (dtype) {
    case TESSERA_F32:
      return 0x1.0p-24;
    case TESSERA_F64:
      return 0x1.0p-53;
    case TESSERA_F16:
      return 0x1.0p-11;
    case TESSERA_BF16:
      return 0x1.0p-8;
    default:
      return 0.0;
  }
}

int64_t reduction_input(tessera_reduce_op op, tessera_dtype dtype, int size, int rank,
                        uint64_t index) noexcept {
  switch (op) {
    case TESSERA_SUM:
      return integer_sum_input(dtype, size, rank, index);
    case TESSERA_AVG:
      return is_floating(dtype) ? float_avg_input(size, rank, index)
                                : integer_sum_input(dtype, size, rank, index);
    case TESSERA_MIN:
    case TESSERA_MAX:
      return extremum_input(dtype, rank, index);
    case TESSERA_PROD:
      return product_input(dtype, rank, index);
    default:
      return 0;
  }
}

int64_t reduction_expected(tessera_reduce_op op, tessera_dtype dtype, int size,
                           uint64_t index) noexcept {
  int64_t acc = reduction_input(op, dtype, size, 0, index);
  for (int r = 1; r < size; ++r) {
    const int64_t v = reduction_input(op, dtype, size, r, index);
    switch (op) {
      case TESSERA_SUM:
      case TESSERA_AVG:
        acc += v;
        break;
      case TESSERA_MIN:
        acc = std::min(acc, v);
        break;
      case TESSERA_MAX:
        acc = std::max(acc, v);
        break;
      case TESSERA_PROD:
        acc *= v;
        break;
      default:
        break;
    }
  }
  // Integer division truncates toward zero, as the ABI specifies for avg;
  // for floating dtypes the float_avg_input pattern makes the true average
  // exact (a backend may still be off in the last bits: rounding_tolerance).
  if (op == TESSERA_AVG) acc /= size;
  return acc;
}

int64_t data_value(int rank, uint64_t index, int salt) noexcept {
  const uint64_t v =
      static_cast<uint64_t>(rank) * 37 + (index % 101) * 11 + static_cast<uint64_t>(salt) * 5;
  return static_cast<int64_t>(v % 101);
}

double noise_value(int rank, uint64_t index, int salt) noexcept {
  // splitmix64 over the three inputs.
  uint64_t z = index * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(rank) * 0xbf58476d1ce4e5b9ULL +
               static_cast<uint64_t>(salt) * 0x94d049bb133111ebULL + 0x2545f4914f6cdd1dULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const double unit = static_cast<double>(z >> 11) * 0x1.0p-53;  // [0, 1)
  return 2.0 * unit - 1.0;
}

}  // namespace tessera::conformance

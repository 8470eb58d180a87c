#include "bench_check.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {

namespace {

// Every input pattern below repeats with this period in the element index
// (lcm of 5, 251 and 3), so reductions over ranks are tabulated once.
constexpr uint64_t kPeriod = uint64_t{5} * 251 * 3;

// Calls fn(T{}) with T the C++ type of `dtype`.
template <typename Fn>
decltype(auto) with_dtype(tessera_dtype dtype, Fn&& fn) {
  switch (dtype) {
    case TESSERA_F32:
      return fn(float{});
    case TESSERA_F64:
      return fn(double{});
    case TESSERA_F16:
      return fn(half{});
    case TESSERA_BF16:
      return fn(bfloat16{});
    case TESSERA_I32:
      return fn(int32_t{});
    case TESSERA_I64:
      return fn(int64_t{});
    case TESSERA_U8:
      return fn(uint8_t{});
    default:
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  "benchmark check: unsupported dtype " + std::to_string(dtype));
  }
}

// Converts a reference value to T the way a backend would store it: floats
// round to nearest, integers truncate toward zero and wrap modulo 2^bits.
template <typename T>
T from_double(double v) noexcept {
  if constexpr (std::is_same_v<T, half>) {
    return to_half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return to_bfloat16(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<int64_t>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
double as_double(T v) noexcept {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return static_cast<double>(to_float(v));
  } else {
    return static_cast<double>(v);
  }
}

// Relative tolerance for avg of floating types.
double avg_tolerance(tessera_dtype dtype) noexcept {
  switch (dtype) {
    case TESSERA_F64:
      return 1e-12;
    case TESSERA_F32:
      return 1e-6;
    case TESSERA_F16:
      return 2e-3;
    case TESSERA_BF16:
      return 1.6e-2;
    default:
      return 0.0;
  }
}

bool is_float(tessera_dtype dtype) noexcept {
  return dtype == TESSERA_F32 || dtype == TESSERA_F64 || dtype == TESSERA_F16 ||
         dtype == TESSERA_BF16;
}

}  // namespace

CheckReference::CheckReference(const CheckCase& c) : case_(c) {
  if (!op_reduces(c.op)) return;
  reduced_.resize(kPeriod);
  for (uint64_t j = 0; j < kPeriod; ++j) {
    double acc = input(0, j);
    for (int r = 1; r < c.ranks; ++r) {
      const double v = input(r, j);
      switch (c.redop) {
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
          acc += v;
          break;  // sum, avg
      }
    }
    if (c.redop == TESSERA_AVG) {
      acc /= c.ranks;
      if (!is_float(c.dtype)) acc = std::trunc(acc);
    }
    reduced_[j] = acc;
  }
}

double CheckReference::input(int rank, uint64_t index) const noexcept {
  const auto r = static_cast<uint64_t>(rank);
  if (!op_reduces(case_.op)) return static_cast<double>((r * 131 + index * 17) % 251);
  switch (case_.redop) {
    case TESSERA_MIN:
    case TESSERA_MAX:
      return static_cast<double>((index * 13 + r * 29) % 251);
    case TESSERA_PROD:
      return (index + r) % 3 == 0 ? 2.0 : 1.0;
    default:  // sum, avg: at most 5 per rank keeps sums exact in bf16 up to 51 ranks
      return static_cast<double>((index * 7 + r * 3) % 5 + 1);
  }
}

double CheckReference::expected(int rank, uint64_t k) const noexcept {
  const uint64_t n = case_.layout.block;
  const auto r = static_cast<uint64_t>(rank);
  switch (case_.op) {
    case TESSERA_COLL_ALLREDUCE:
    case TESSERA_COLL_REDUCE:
      return reduced_[k % kPeriod];
    case TESSERA_COLL_REDUCE_SCATTER:
      return reduced_[(r * n + k) % kPeriod];
    case TESSERA_COLL_BROADCAST:
      return input(0, k);
    case TESSERA_COLL_ALLGATHER:
    case TESSERA_COLL_GATHER:
      return input(static_cast<int>(k / n), k % n);
    case TESSERA_COLL_SCATTER:
      return input(0, r * n + k);
    case TESSERA_COLL_ALLTOALL:
      return input(static_cast<int>(k / n), r * n + k % n);
    default:
      return 0.0;
  }
}

void CheckReference::fill_input(int rank, void* send) const {
  with_dtype(case_.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(send);
    for (uint64_t j = 0; j < case_.layout.send_count; ++j) out[j] = from_double<T>(input(rank, j));
  });
}

void CheckReference::fill_sentinel(void* data, uint64_t count) const {
  with_dtype(case_.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::fill_n(static_cast<T*>(data), count, from_double<T>(-1.0));
  });
}

uint64_t CheckReference::count_wrong(int rank, const void* result) const {
  const bool rooted = case_.op == TESSERA_COLL_REDUCE || case_.op == TESSERA_COLL_GATHER;
  if (rooted && rank != 0) return 0;
  const uint64_t count = case_.layout.in_place ? case_.layout.send_count : case_.layout.recv_count;
  const bool approximate =
      case_.redop == TESSERA_AVG && op_reduces(case_.op) && is_float(case_.dtype);
  const double tol = avg_tolerance(case_.dtype);
  return with_dtype(case_.dtype, [&](auto tag) -> uint64_t {
    using T = decltype(tag);
    const T* got = static_cast<const T*>(result);
    uint64_t wrong = 0;
    for (uint64_t k = 0; k < count; ++k) {
      const double want = expected(rank, k);
      const double have = as_double(got[k]);
      const bool ok = approximate ? std::fabs(have - want) <= tol * std::max(1.0, std::fabs(want))
                                  : have == as_double(from_double<T>(want));
      if (!ok) ++wrong;
    }
    return wrong;
  });
}

}  // namespace tessera::cli

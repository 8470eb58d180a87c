// Element-wise reduction kernels shared by every backend.
//
// Each entry point switches once on (dtype, op) and then runs a tight loop
// over fixed-size tiles: sources are combined into a small local accumulator
// array (which nothing else can alias, so the compiler vectorises the loops
// even at -O2) and the result is stored once per element. f16 and bf16 are
// widened to f32 for the arithmetic and rounded once when stored.
//
// Integer arithmetic wraps modulo 2^bits (no undefined signed overflow).
// AVG is SUM divided by a count; integers divide with truncation toward
// zero. reduce_sources() accumulates an integer AVG in 64 bits, so it is
// exact unless the true sum itself overflows 64 bits; the pairwise chain
// reduce_into() + finish_avg() wraps in the element type between steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tessera/c/common.h"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::sdk {
namespace reduce_detail {

// Elements per tile: the accumulator is at most 2 KiB and stays in L1.
inline constexpr size_t kTile = 256;

// Arithmetic type of T for SUM/MIN/MAX/PROD.
template <typename T>
struct Accum {
  using type = T;
};
template <>
struct Accum<half> {
  using type = float;
};
template <>
struct Accum<bfloat16> {
  using type = float;
};

// Arithmetic type of T for AVG over many sources: integers widen to 64 bits.
template <typename T>
struct AvgAccum {
  using type = std::conditional_t<std::is_integral_v<T>,
                                  std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>,
                                  typename Accum<T>::type>;
};

template <typename Acc, typename T>
inline Acc load(T v) noexcept {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return static_cast<Acc>(to_float(v));
  } else {
    return static_cast<Acc>(v);
  }
}

template <typename T, typename Acc>
inline T store(Acc v) noexcept {
  if constexpr (std::is_same_v<T, half>) {
    return to_half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return to_bfloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

struct SumOp {
  template <typename A>
  static A apply(A a, A b) noexcept {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
struct ProdOp {
  template <typename A>
  static A apply(A a, A b) noexcept {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};
struct MinOp {
  template <typename A>
  static A apply(A a, A b) noexcept {
    return b < a ? b : a;
  }
};
struct MaxOp {
  template <typename A>
  static A apply(A a, A b) noexcept {
    return a < b ? b : a;
  }
};

// One tile of `n` elements (n is std::integral_constant<size_t, kTile> for
// full tiles, so the loops have a constant trip count, or a size_t for the
// last one): dst = op over the k sources, then divided by `divisor` if kAvg.
template <typename T, typename Acc, typename Op, bool kAvg, typename N>
inline void reduce_tile(T* dst, const void* const* srcs, size_t k, size_t offset, N n,
                        Acc divisor) {
  Acc acc[kTile];
  const T* s0 = static_cast<const T*>(srcs[0]) + offset;
  for (size_t j = 0; j < n; ++j) acc[j] = load<Acc>(s0[j]);
  for (size_t q = 1; q < k; ++q) {
    const T* s = static_cast<const T*>(srcs[q]) + offset;
    for (size_t j = 0; j < n; ++j) acc[j] = Op::apply(acc[j], load<Acc>(s[j]));
  }
  if constexpr (kAvg) {
    for (size_t j = 0; j < n; ++j) acc[j] = acc[j] / divisor;
  }
  T* d = dst + offset;
  for (size_t j = 0; j < n; ++j) d[j] = store<T>(acc[j]);
}

template <typename T, typename Acc, typename Op, bool kAvg>
void reduce_typed(T* dst, const void* const* srcs, size_t k, uint64_t count, Acc divisor) {
  const size_t total = static_cast<size_t>(count);
  size_t offset = 0;
  for (; offset + kTile <= total; offset += kTile) {
    reduce_tile<T, Acc, Op, kAvg>(dst, srcs, k, offset, std::integral_constant<size_t, kTile>{},
                                  divisor);
  }
  if (offset < total) reduce_tile<T, Acc, Op, kAvg>(dst, srcs, k, offset, total - offset, divisor);
}

// Dispatches on op for element type T. `avg_divisor` > 0 makes AVG divide
// by it; 0 makes AVG behave as SUM (the caller finishes it).
template <typename T>
void reduce_op(void* dst, const void* const* srcs, size_t k, uint64_t count, tessera_reduce_op op,
               int64_t avg_divisor) {
  using Acc = typename Accum<T>::type;
  auto* d = static_cast<T*>(dst);
  const void* const* s = srcs;
  switch (op) {
    case TESSERA_SUM:
      reduce_typed<T, Acc, SumOp, false>(d, s, k, count, Acc{});
      return;
    case TESSERA_PROD:
      reduce_typed<T, Acc, ProdOp, false>(d, s, k, count, Acc{});
      return;
    case TESSERA_MIN:
      reduce_typed<T, Acc, MinOp, false>(d, s, k, count, Acc{});
      return;
    case TESSERA_MAX:
      reduce_typed<T, Acc, MaxOp, false>(d, s, k, count, Acc{});
      return;
    case TESSERA_AVG:
      if (avg_divisor > 0) {
        using Wide = typename AvgAccum<T>::type;
        reduce_typed<T, Wide, SumOp, true>(d, s, k, count, static_cast<Wide>(avg_divisor));
      } else {
        reduce_typed<T, Acc, SumOp, false>(d, s, k, count, Acc{});
      }
      return;
    default:
      break;
  }
  throw Error(TESSERA_ERR_INVALID_ARGUMENT,
              ::tessera::detail::concat("reduce: unknown reduce op ", op));
}

}  // namespace reduce_detail

// Calls fn(T{}) with T the C++ element type of `dtype` (sdk::half and
// sdk::bfloat16 for the 16-bit floats). Throws Error(INVALID_ARGUMENT) for an
// unknown dtype.
template <typename Fn>
void visit_dtype(tessera_dtype dtype, Fn&& fn) {
  switch (dtype) {
    case TESSERA_F32:
      fn(float{});
      return;
    case TESSERA_F64:
      fn(double{});
      return;
    case TESSERA_F16:
      fn(half{});
      return;
    case TESSERA_BF16:
      fn(bfloat16{});
      return;
    case TESSERA_I32:
      fn(int32_t{});
      return;
    case TESSERA_I64:
      fn(int64_t{});
      return;
    case TESSERA_U8:
      fn(uint8_t{});
      return;
    default:
      break;
  }
  throw Error(TESSERA_ERR_INVALID_ARGUMENT,
              ::tessera::detail::concat("reduce: unknown dtype ", dtype));
}

// dst[i] = op over srcs[0..k)[i] for i < count, all of `dtype`. AVG divides
// the sum by k. dst may be exactly one of the sources (in place) but must not
// otherwise overlap them. k >= 1. Throws Error(INVALID_ARGUMENT) for an
// unknown dtype or op, or k == 0.
inline void reduce_sources(void* dst, const void* const* srcs, size_t k, uint64_t count,
                           tessera_dtype dtype, tessera_reduce_op op) {
  TESSERA_CHECK(k >= 1, TESSERA_ERR_INVALID_ARGUMENT, "reduce_sources needs at least one source");
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    reduce_detail::reduce_op<T>(dst, srcs, k, count, op, static_cast<int64_t>(k));
  });
}

// dst[i] = dst[i] op src[i] for i < count. AVG accumulates like SUM; call
// finish_avg() once the last contribution is in. src may equal dst. Throws
// Error(INVALID_ARGUMENT) for an unknown dtype or op.
inline void reduce_into(void* dst, const void* src, uint64_t count, tessera_dtype dtype,
                        tessera_reduce_op op) {
  const void* srcs[2] = {dst, src};
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    reduce_detail::reduce_op<T>(dst, srcs, 2, count, op, 0);
  });
}

// dst[i] = dst[i] / divisor for i < count (integers truncate toward zero;
// f16/bf16 divide in f32). Finishes an AVG built with reduce_into(). Throws
// Error(INVALID_ARGUMENT) for an unknown dtype or divisor < 1.
inline void finish_avg(void* dst, uint64_t count, tessera_dtype dtype, int64_t divisor) {
  TESSERA_CHECK(divisor >= 1, TESSERA_ERR_INVALID_ARGUMENT,
                "finish_avg: divisor must be >= 1, got ", divisor);
  const void* srcs[1] = {dst};
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using Wide = typename reduce_detail::AvgAccum<T>::type;
    reduce_detail::reduce_typed<T, Wide, reduce_detail::SumOp, true>(
        static_cast<T*>(dst), srcs, 1, count, static_cast<Wide>(divisor));
  });
}

}  // namespace tessera::sdk

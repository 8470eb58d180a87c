// Input patterns and exact expected results for the conformance cases.
//
// Every value here is a small integer, so it is represented exactly in every
// dtype (f16 holds integers up to 2048 exactly, bf16 up to 256, u8 up to 255)
// and every partial result of a reduction stays exact whatever order a backend
// reduces in. That makes expected values exact: no tolerance is needed. The
// patterns stay exact for group sizes up to 8 (the product pattern uses the
// factor 2 on at most four ranks; sums stay below 256).
#pragma once

#include <cstdint>

#include "tessera/c/common.h"

namespace tessera::conformance {

// Value that never occurs as an input or expected value; receive buffers are
// filled with it before an operation so untouched elements are noticed.
inline constexpr int64_t kSentinel = 123;

// True for the floating-point dtypes (f32, f64, f16, bf16).
bool is_floating(tessera_dtype dtype) noexcept;

// Unit roundoff of a floating dtype (2^-24 for f32); 0 for the others.
double unit_roundoff(tessera_dtype dtype) noexcept;

// Input of `rank` (of `size` ranks) at element `index` for a reduction with
// `op` in `dtype`:
//   sum, avg (integers)  1..7 in magnitude, negative for some elements of
//                        signed types, so truncation toward zero is tested
//   avg (floats)         c(i) + 2*((rank+i) % size): the sum is a multiple of
//                        the group size, so the average is exact
//   min, max             rank-dependent values in -5..5 (u8: 0..230)
//   prod                 ±1 and ±2 (u8: 1 and 2), 2 only on ranks 0..3
int64_t reduction_input(tessera_reduce_op op, tessera_dtype dtype, int size, int rank,
                        uint64_t index) noexcept;

// Exact result of reducing reduction_input over all `size` ranks at `index`.
// avg divides the sum by `size`, truncating toward zero for integer dtypes.
int64_t reduction_expected(tessera_reduce_op op, tessera_dtype dtype, int size,
                           uint64_t index) noexcept;

// Payload for data-movement operations (broadcast, gathers, alltoall,
// send/recv): a value in 0..100 depending on the sending rank, the element
// and a `salt` that tells different messages of one case apart.
int64_t data_value(int rank, uint64_t index, int salt) noexcept;

// A deterministic pseudo-random real in [-1, 1) for (rank, index, salt); used
// where results are not exact (bitwise agreement).
double noise_value(int rank, uint64_t index, int salt) noexcept;

}  // namespace tessera::conformance

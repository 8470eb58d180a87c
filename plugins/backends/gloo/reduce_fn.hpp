// Element-wise reductions handed to gloo, for every dtype and op.
//
// gloo combines two buffers at a time. f16 and bf16 are widened to f32 for
// each combination and rounded once when stored; integers wrap modulo
// 2^bits. AVG is run as SUM and finished by dividing by the group size
// afterwards (integers truncate toward zero), like the conformance
// reference. MIN/MAX keep the first operand on ties.
#pragma once

#include <cstddef>
#include <cstdint>

#include <gloo/algorithm.h>

#include "tessera/c/common.h"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/reduce.hpp"

namespace tessera::gloo_backend {

// gloo's reduction callback: out[i] = a[i] op b[i] for i < n (out may be a).
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// The callback for `dtype` and `op` (AVG gives SUM's). Throws
// Error(INVALID_ARGUMENT) for an unknown dtype or op.
ReduceFn reduce_fn(tessera_dtype dtype, tessera_reduce_op op);

// The in-place form gloo's algorithm classes take (x = x op y), for element
// type T. Static objects: valid for the life of the program. Throws
// Error(INVALID_ARGUMENT) for an unknown op.
template <typename T>
const gloo::ReductionFunction<T>* class_reduction(tessera_reduce_op op);

// Divides each of `count` elements at `data` by `size` (AVG's last step;
// integers truncate toward zero, f16/bf16 divide in f32).
void finish_avg(void* data, uint64_t count, tessera_dtype dtype, int32_t size);

}  // namespace tessera::gloo_backend

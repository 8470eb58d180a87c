// Lower-precision communication of f32 data: the `reduce_dtype` style
// option ("f32", "bf16", "f16") and the conversions into and out of a
// 16-bit staging buffer. Strategies keep f32 master values and only the
// bytes on the wire shrink.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tessera/c/common.h"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::sdk {

// The dtype named by `value` of option `option`: "f32", "bf16" or "f16".
// Throws tessera::Error (invalid argument) naming the option, the value and
// the valid values otherwise.
inline tessera_dtype parse_comm_dtype(const std::string& value, const char* option) {
  if (value == "f32") return TESSERA_F32;
  if (value == "bf16") return TESSERA_BF16;
  if (value == "f16") return TESSERA_F16;
  throw Error(TESSERA_ERR_INVALID_ARGUMENT,
              ::tessera::detail::concat("option '", option, "' = '", value,
                                        "' is not a valid dtype; valid: f32, bf16, f16"));
}

// A CPU buffer of `count` elements of `dtype` at `data`: the send or
// receive side of a collective on a (possibly 16-bit) staging buffer.
inline tessera_buffer wire_buffer(void* data, size_t count, tessera_dtype dtype) noexcept {
  return tessera_buffer{data, count, dtype, tessera_device{TESSERA_DEVICE_CPU, 0}};
}

// Converts `src` into `dst` (src.size() elements of `dtype`, F16 or BF16,
// round to nearest even). Throws tessera::Error (invalid argument) for any
// other dtype.
inline void pack_16bit(std::span<const float> src, tessera_dtype dtype, void* dst) {
  const size_t n = src.size();
  if (dtype == TESSERA_BF16) {
    auto* out = static_cast<bfloat16*>(dst);
    for (size_t i = 0; i < n; ++i) out[i] = to_bfloat16(src[i]);
  } else if (dtype == TESSERA_F16) {
    auto* out = static_cast<half*>(dst);
    for (size_t i = 0; i < n; ++i) out[i] = to_half(src[i]);
  } else {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                ::tessera::detail::concat("pack_16bit: dtype ", dtype_name(dtype),
                                          " is not a 16-bit float type"));
  }
}

// Converts dst.size() elements of `dtype` (F16 or BF16) at `src` back to
// f32. Same failure as pack_16bit.
inline void unpack_16bit(const void* src, tessera_dtype dtype, std::span<float> dst) {
  const size_t n = dst.size();
  if (dtype == TESSERA_BF16) {
    const auto* in = static_cast<const bfloat16*>(src);
    for (size_t i = 0; i < n; ++i) dst[i] = to_float(in[i]);
  } else if (dtype == TESSERA_F16) {
    const auto* in = static_cast<const half*>(src);
    for (size_t i = 0; i < n; ++i) dst[i] = to_float(in[i]);
  } else {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                ::tessera::detail::concat("unpack_16bit: dtype ", dtype_name(dtype),
                                          " is not a 16-bit float type"));
  }
}

}  // namespace tessera::sdk

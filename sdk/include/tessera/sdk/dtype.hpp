// Element types at the C++ level: 16-bit float storage types, conversions,
// the dtype of a C++ type, and printable names of the ABI enums.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "tessera/c/backend.h"
#include "tessera/c/common.h"

namespace tessera {

// IEEE 754 binary16 storage. Arithmetic happens in float.
struct half {
  uint16_t bits = 0;
};
// bfloat16 storage (upper half of an f32). Arithmetic happens in float.
struct bfloat16 {
  uint16_t bits = 0;
};

inline float to_float(bfloat16 v) noexcept {
  const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Rounds to nearest even; NaN stays NaN.
inline bfloat16 to_bfloat16(float f) noexcept {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffU) > 0x7f800000U) return bfloat16{static_cast<uint16_t>((u >> 16) | 0x40U)};
  u += 0x7fffU + ((u >> 16) & 1U);
  return bfloat16{static_cast<uint16_t>(u >> 16)};
}

inline float to_float(half v) noexcept {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x8000U) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1fU;
  uint32_t mant = v.bits & 0x3ffU;
  uint32_t u = 0;
  if (exp == 0x1fU) {
    u = sign | 0x7f800000U | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    u = sign | ((exp + 112U) << 23) | (mant << 13);
  } else if (mant != 0) {  // subnormal: normalise
    exp = 113;
    while ((mant & 0x400U) == 0) {
      mant <<= 1;
      --exp;
    }
    u = sign | (exp << 23) | ((mant & 0x3ffU) << 13);
  } else {
    u = sign;
  }
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Rounds to nearest even; overflow gives infinity; NaN stays NaN.
inline half to_half(float f) noexcept {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000U);
  const uint32_t abs = u & 0x7fffffffU;
  if (abs > 0x7f800000U) return half{static_cast<uint16_t>(sign | 0x7e00U)};
  if (abs >= 0x477ff000U) return half{static_cast<uint16_t>(sign | 0x7c00U)};  // overflow
  if (abs < 0x38800000U) {                                                     // subnormal / zero
    if (abs < 0x33000000U) return half{sign};
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffU) | 0x800000U;
    const uint32_t shift = 126U - exp;  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1U << shift) - 1U);
    const uint32_t halfway = 1U << (shift - 1U);
    if (rem > halfway || (rem == halfway && (h & 1U) != 0)) ++h;
    return half{static_cast<uint16_t>(sign | h)};
  }
  uint32_t h = ((abs - 0x38000000U) >> 13);
  const uint32_t rem = abs & 0x1fffU;
  if (rem > 0x1000U || (rem == 0x1000U && (h & 1U) != 0)) ++h;
  return half{static_cast<uint16_t>(sign | h)};
}

// dtype_of<T>::value is the ABI dtype of C++ element type T.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr tessera_dtype value = TESSERA_F32;
};
template <>
struct dtype_of<double> {
  static constexpr tessera_dtype value = TESSERA_F64;
};
template <>
struct dtype_of<half> {
  static constexpr tessera_dtype value = TESSERA_F16;
};
template <>
struct dtype_of<bfloat16> {
  static constexpr tessera_dtype value = TESSERA_BF16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr tessera_dtype value = TESSERA_I32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr tessera_dtype value = TESSERA_I64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr tessera_dtype value = TESSERA_U8;
};

inline std::string_view dtype_name(tessera_dtype d) noexcept {
  switch (d) {
    case TESSERA_F32:
      return "f32";
    case TESSERA_F64:
      return "f64";
    case TESSERA_F16:
      return "f16";
    case TESSERA_BF16:
      return "bf16";
    case TESSERA_I32:
      return "i32";
    case TESSERA_I64:
      return "i64";
    case TESSERA_U8:
      return "u8";
    default:
      return "?";
  }
}

inline std::string_view reduce_op_name(tessera_reduce_op op) noexcept {
  switch (op) {
    case TESSERA_SUM:
      return "sum";
    case TESSERA_AVG:
      return "avg";
    case TESSERA_MIN:
      return "min";
    case TESSERA_MAX:
      return "max";
    case TESSERA_PROD:
      return "prod";
    default:
      return "?";
  }
}

inline std::string_view coll_name(tessera_coll_type c) noexcept {
  switch (c) {
    case TESSERA_COLL_ALLREDUCE:
      return "allreduce";
    case TESSERA_COLL_BROADCAST:
      return "broadcast";
    case TESSERA_COLL_REDUCE:
      return "reduce";
    case TESSERA_COLL_ALLGATHER:
      return "allgather";
    case TESSERA_COLL_REDUCE_SCATTER:
      return "reduce_scatter";
    case TESSERA_COLL_GATHER:
      return "gather";
    case TESSERA_COLL_SCATTER:
      return "scatter";
    case TESSERA_COLL_ALLTOALL:
      return "alltoall";
    case TESSERA_COLL_BARRIER:
      return "barrier";
    case TESSERA_COLL_SEND:
      return "send";
    case TESSERA_COLL_RECV:
      return "recv";
    default:
      return "?";
  }
}

inline std::string_view kind_name(tessera_plugin_kind k) noexcept {
  switch (k) {
    case TESSERA_KIND_BACKEND:
      return "backend";
    case TESSERA_KIND_STRATEGY:
      return "strategy";
    case TESSERA_KIND_COMPRESSOR:
      return "compressor";
    case TESSERA_KIND_SELECTOR:
      return "selector";
    case TESSERA_KIND_MODEL:
      return "model";
    default:
      return "?";
  }
}

}  // namespace tessera

// Stand-in for CUDA's half-precision header (see cuda_runtime.h here).
#pragma once

#include <cstdint>
#include <cstring>

struct __half {
  uint16_t bits;
};

// IEEE binary16 of `f`, rounded to nearest even as the device's conversion:
// beyond 65504 infinity, below 2^-14 subnormal, NaN kept a NaN.
inline __half __float2half_rn(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000U);
  const uint32_t magnitude = u & 0x7fffffffU;
  if (magnitude > 0x7f800000U) return {static_cast<uint16_t>(sign | 0x7e00U)};   // NaN
  if (magnitude >= 0x477ff000U) return {static_cast<uint16_t>(sign | 0x7c00U)};  // rounds to inf
  if (magnitude < 0x38800000U) {
    // Subnormal (or zero): the value in units of 2^-24, rounded to nearest even.
    const int shift = 126 - static_cast<int>(magnitude >> 23);  // mantissa · 2^(exponent − 126)
    if (shift > 24) return {sign};
    const uint32_t mantissa = (magnitude & 0x7fffffU) | 0x800000U;
    const uint32_t half_ulp = 1U << (shift - 1);
    uint32_t rounded = mantissa >> shift;
    const uint32_t rest = mantissa & ((1U << shift) - 1U);
    if (rest > half_ulp || (rest == half_ulp && (rounded & 1U) != 0)) ++rounded;
    return {static_cast<uint16_t>(sign | rounded)};
  }
  // Normal: rebias the exponent (127 → 15) and round the 13 dropped bits.
  const uint32_t rebiased = magnitude - 0x38000000U;
  uint32_t rounded = rebiased >> 13;
  const uint32_t rest = rebiased & 0x1fffU;
  if (rest > 0x1000U || (rest == 0x1000U && (rounded & 1U) != 0)) ++rounded;
  return {static_cast<uint16_t>(sign | rounded)};
}

// Exact: every binary16 value is a float.
inline float __half2float(__half h) {
  const uint32_t sign = (h.bits & 0x8000U) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fU;
  const uint32_t mantissa = h.bits & 0x3ffU;
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign != 0 ? -value : value;
  }
  const uint32_t u = sign | (exponent == 31 ? 0x7f800000U | (mantissa << 13)
                                            : ((exponent + 112) << 23) | (mantissa << 13));
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

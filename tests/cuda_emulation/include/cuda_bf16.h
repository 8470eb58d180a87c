// Stand-in for CUDA's bfloat16 header (see cuda_runtime.h here).
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t bits;
};

// Round to nearest even, as the device's conversion (NaN kept a NaN).
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffU) > 0x7f800000U) return {static_cast<uint16_t>((u >> 16) | 0x40U)};
  u += 0x7fffU + ((u >> 16) & 1U);
  return {static_cast<uint16_t>(u >> 16)};
}

// Exact: the 16 bits are the float's upper half.
inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Branch-free float exp and tanh for the element-wise kernels, written so
// the compiler can vectorise loops over them (no calls, no table lookups,
// no data-dependent branches). The libm versions are exact to an ulp but
// are scalar calls; the GELU of a gpt block spent more time in tanhf than
// all its matrix products together.
//
// Accuracy over the whole float range: exp_approx within 2 ulp of exp for
// inputs in [-87, 88] (clamped outside); tanh_approx within 1.5e-7 absolute
// of tanh. Both are pure functions of their input, so results are
// deterministic and identical whether a loop is vectorised or not (no FMA
// contraction on the baseline x86-64 target).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace tessera::model::kernels {

// e^x: x = n·ln2 + r with |r| <= ln2/2 (ln2 split in two parts so n·ln2_hi
// is exact), e^r by its degree-7 Taylor polynomial (truncation < 6e-9 relative
// on that interval), times 2^n assembled in the exponent bits.
// `x` must lie in [-87, 88] (exp_approx below clamps it first).
inline float exp_approx_in_range(float x) noexcept {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // 12 significant bits: n·kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  // Round x·log2e to the nearest integer n with the float magic number: in
  // kRound + y (|y| < 2^22) the low mantissa bits hold n in two's
  // complement, so n is read from the bits without a float-to-int
  // conversion (which would keep the loop from being vectorised).
  constexpr float kRound = 12582912.0f;  // 1.5 · 2^23
  const float shifted = x * kLog2e + kRound;
  const float n = shifted - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n for n in [-126, 127]: (n + 127) in the exponent bits 23..30.
  const uint32_t bits = (std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kRound) + 127u)
                        << 23;
  const float scale = std::bit_cast<float>(bits);
  return p * scale;
}

// e^x for any x: clamped to [-87, 88] first, so the result is finite.
inline float exp_approx(float x) noexcept {
  return exp_approx_in_range(std::max(-87.0f, std::min(x, 88.0f)));
}

// tanh(x) = sign(x) · (1 - 2 / (e^{2|x|} + 1)); |x| is clamped to 10, where
// the formula already rounds to exactly 1 in float. The sign, |x| and the
// clamp are done on the bits (for a non-negative float, the order of the
// bit patterns as integers is the order of the values), which the compiler
// vectorises where float comparisons would stay branches.
inline float tanh_approx(float x) noexcept {
  constexpr uint32_t kSign = 0x80000000u;
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const auto abs_bits = static_cast<int32_t>(bits & ~kSign);
  const float a = std::bit_cast<float>(std::min(abs_bits, std::bit_cast<int32_t>(10.0f)));
  const float t = 1.0f - 2.0f / (exp_approx_in_range(2.0f * a) + 1.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(t) | (bits & kSign));
}

}  // namespace tessera::model::kernels

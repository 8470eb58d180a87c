// What the in-tree compressor plugins share: a counter-based random number
// generator (the same numbers on every rank and in every run for the same
// key, whatever thread asks) and the checks of a bucket and of a decode
// range. Header only; each plugin includes it through its include path.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "tessera/sdk/compressor.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::compressors {

// SplitMix64's finaliser: a bijective mix of 64 bits.
constexpr uint64_t mix64(uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31U);
}

// A stream of random numbers named by a key (seed, bucket, rank, step...):
// number i of a stream is mix64(key ^ mix64(i)), so any element can be drawn
// without drawing the ones before it.
class CounterRng {
 public:
  CounterRng() = default;
  // The key of the parts, in order.
  template <typename... Parts>
  explicit CounterRng(Parts... parts) noexcept {
    ((key_ = mix64(key_ ^ static_cast<uint64_t>(parts))), ...);
  }
  [[nodiscard]] uint64_t bits(uint64_t i) const noexcept { return mix64(key_ ^ mix64(i)); }
  // Uniform in [0, 1) with 24 random bits (exact in f32).
  [[nodiscard]] float uniform(uint64_t i) const noexcept {
    return static_cast<float>(bits(i) >> 40U) * 0x1p-24F;
  }
  // Standard normal (Box-Muller on two 53-bit uniforms in (0, 1]).
  [[nodiscard]] double normal(uint64_t i) const noexcept {
    const uint64_t b = bits(i);
    const double u1 = (static_cast<double>(b >> 11U) + 1.0) * 0x1p-53;
    const double u2 = static_cast<double>(mix64(b) >> 11U) * 0x1p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t key_ = 0;
};

// Throws unless [offset, offset + count) lies inside a bucket of `elements`
// and `encodings` is at least 1 (the decode of a GATHER compressor).
inline void check_decode(const char* who, uint64_t elements, int32_t encodings, uint64_t offset,
                         uint64_t count) {
  TESSERA_CHECK(encodings >= 1, TESSERA_ERR_INVALID_ARGUMENT, who, ": decode of ", encodings,
                " encodings (at least 1: one per rank)");
  TESSERA_CHECK(offset <= elements && count <= elements - offset, TESSERA_ERR_INVALID_ARGUMENT, who,
                ": decode of [", offset, ", ", offset + count, ") outside a bucket of ", elements,
                " elements");
}

// Throws unless the bucket has elements and a world of at least one rank.
inline void check_bucket(const char* who, const sdk::CompressBucket& b) {
  TESSERA_CHECK(b.elements >= 1, TESSERA_ERR_INVALID_ARGUMENT, who, ": bucket ", b.index,
                " has no elements");
  TESSERA_CHECK(b.world_size >= 1 && b.rank >= 0 && b.rank < b.world_size,
                TESSERA_ERR_INVALID_ARGUMENT, who, ": bucket ", b.index, " has rank ", b.rank,
                " of a world of ", b.world_size);
}

}  // namespace tessera::compressors

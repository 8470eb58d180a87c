// Counter-based random numbers, shared by the host's data sampling and the
// models' initialisation: a value is a pure function of (seed, step, index),
// so any rank can compute any example of any step without generating the
// ones before it, and a model plugin initialises the same bits as the host
// would.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace tessera {

// The splitmix64 finaliser of x + golden ratio: a bijective 64-bit mix.
constexpr uint64_t splitmix64(uint64_t x) noexcept {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The key of example `index` of global step `step` under `seed`.
constexpr uint64_t sample_key(uint64_t seed, uint64_t step, uint64_t index) noexcept {
  return splitmix64(splitmix64(splitmix64(seed) ^ step) ^ index);
}

// A small stream of random numbers seeded by one key (splitmix64 over a
// counter). Cheap to create per example.
class KeyedRng {
 public:
  explicit constexpr KeyedRng(uint64_t key) noexcept : state_(key) {}

  // Next 64 random bits.
  constexpr uint64_t next() noexcept {
    state_ += 0x9E3779B97F4A7C15ULL;
    return splitmix64(state_);
  }
  // Uniform in [0, bound) for bound >= 1 (bias below 2^-32 for bounds under
  // 2^32).
  constexpr uint64_t below(uint64_t bound) noexcept { return next() % bound; }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept {
    return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
  }
  // Standard normal (Box-Muller on two uniforms).
  double normal() noexcept {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace tessera

// gloo's waits always take a timeout; a wait without one uses this.
#pragma once

#include <chrono>

namespace tessera::gloo_backend {

inline constexpr std::chrono::milliseconds kForever = std::chrono::hours(100);

}  // namespace tessera::gloo_backend

// What the kinds of the host's store share: waiting for keys another
// process writes by looking again and again, and naming keys in messages.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tessera/sdk/error.hpp"

namespace tessera::store::common {

// "'a', 'b'" for messages.
inline std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

// Calls `ready` until it returns true, pausing in between (1 ms, doubling
// up to 50 ms: quick for a key that is nearly there, at most 20 looks a
// second per waiter after that); false once `timeout_ms` (< 0: none) has
// passed without it.
template <typename Ready>
bool poll_until(int64_t timeout_ms, Ready&& ready) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kLongestPause =
      std::chrono::duration_cast<Clock::duration>(std::chrono::milliseconds(50));
  const auto start = Clock::now();
  auto pause = std::chrono::duration_cast<Clock::duration>(std::chrono::milliseconds(1));
  for (;;) {
    if (std::forward<Ready>(ready)()) return true;
    auto nap = pause;
    if (timeout_ms >= 0) {
      const auto left = start + std::chrono::milliseconds(timeout_ms) - Clock::now();
      if (left <= Clock::duration::zero()) return false;
      nap = std::min(nap, left);
    }
    std::this_thread::sleep_for(nap);
    pause = std::min(pause * 2, kLongestPause);
  }
}

// The value of `key` once `fetch` (returning std::optional<std::vector<char>>)
// finds it; Error(TIMEOUT) naming the key, the store (`description`) and
// the timeout when `timeout_ms` (< 0: none) passes first.
template <typename Fetch>
std::vector<char> await_value(const std::string& key, const std::string& description,
                              int64_t timeout_ms, Fetch&& fetch) {
  std::optional<std::vector<char>> found;
  const bool ready = poll_until(timeout_ms, [&] {
    found = std::forward<Fetch>(fetch)();
    return found.has_value();
  });
  if (!ready) {
    throw Error(TESSERA_ERR_TIMEOUT,
                ::tessera::detail::concat("waiting for key '", key, "' in the ", description,
                                          " timed out after ", timeout_ms, " ms"));
  }
  return std::move(*found);
}

}  // namespace tessera::store::common

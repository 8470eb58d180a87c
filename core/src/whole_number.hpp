// A count written in decimal digits, as the host's own records (checkpoint
// metadata, rank file names) and the kernel's files hold them.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

// `text` as a whole number >= 0: decimal digits and nothing else; nullopt
// when it is empty, holds anything else (a sign, spaces, "max") or is past
// int64_t.
inline std::optional<int64_t> whole_number(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 0) {
    return std::nullopt;
  }
  return value;
}

}  // namespace tessera

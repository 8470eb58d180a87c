// Memory sizes (byte_size.hpp).
#include "tessera/core/byte_size.hpp"

#include <array>
#include <cctype>
#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace tessera {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Multiplier of a unit, 0 if unknown.
double unit_multiplier(std::string_view unit) {
  static const std::array<std::pair<const char*, double>, 10> kUnits{{
      {"", 1.0},
      {"b", 1.0},
      {"kib", 1024.0},
      {"mib", 1024.0 * 1024.0},
      {"gib", 1024.0 * 1024.0 * 1024.0},
      {"tib", 1024.0 * 1024.0 * 1024.0 * 1024.0},
      {"kb", 1e3},
      {"mb", 1e6},
      {"gb", 1e9},
      {"tb", 1e12},
  }};
  const std::string u = lower(unit);
  for (const auto& [name, mult] : kUnits) {
    if (u == name) return mult;
  }
  return 0.0;
}

}  // namespace

std::optional<int64_t> parse_memory_size(std::string_view text) {
  size_t i = 0;
  bool digits = false;
  bool dot = false;
  while (i < text.size()) {
    const char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c)) != 0) {
      digits = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
    ++i;
  }
  if (!digits) return std::nullopt;
  const double number = std::stod(std::string(text.substr(0, i)));
  while (i < text.size() && text[i] == ' ') ++i;
  const double mult = unit_multiplier(text.substr(i));
  if (mult == 0.0) return std::nullopt;
  const double bytes = std::floor(number * mult);
  if (!(bytes >= 1.0) || bytes >= 9.2e18) return std::nullopt;
  return static_cast<int64_t>(bytes);
}

std::string memory_size_hint() {
  return "a positive number with a unit, e.g. \"2GiB\", \"512MiB\" (powers of 1024: KiB, MiB, "
         "GiB, TiB) or \"4GB\" (powers of 1000: KB, MB, GB, TB); a number alone counts bytes";
}

std::string format_memory(int64_t bytes) {
  const auto b = static_cast<double>(bytes);
  constexpr double kKiB = 1024.0;
  if (std::abs(b) < kKiB) return fmt::format("{} B", bytes);
  if (std::abs(b) < kKiB * kKiB) return fmt::format("{:.1f} KiB", b / kKiB);
  if (std::abs(b) < kKiB * kKiB * kKiB) return fmt::format("{:.1f} MiB", b / (kKiB * kKiB));
  if (std::abs(b) < kKiB * kKiB * kKiB * kKiB) {
    return fmt::format("{:.2f} GiB", b / (kKiB * kKiB * kKiB));
  }
  return fmt::format("{:.2f} TiB", b / (kKiB * kKiB * kKiB * kKiB));
}

}  // namespace tessera

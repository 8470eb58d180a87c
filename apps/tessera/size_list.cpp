#include "size_list.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <string>

#include "cli_error.hpp"

namespace tessera::cli {

namespace {

constexpr uint64_t kKiB = 1024;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// Multiplier of a suffix ("", "K", "KB", "m", ...), 0 if unknown.
uint64_t suffix_multiplier(std::string_view suffix) {
  if (suffix.empty() || iequals(suffix, "B")) return 1;
  if (suffix.size() == 2 && std::toupper(static_cast<unsigned char>(suffix[1])) == 'B') {
    suffix.remove_suffix(1);
  }
  if (iequals(suffix, "K")) return kKiB;
  if (iequals(suffix, "M")) return kKiB * kKiB;
  if (iequals(suffix, "G")) return kKiB * kKiB * kKiB;
  return 0;
}

}  // namespace

uint64_t parse_byte_size(std::string_view text) {
  const std::string shown = "'" + std::string(text) + "'";
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])) != 0) {
    ++digits;
  }
  if (digits == 0) {
    throw UsageError("invalid size " + shown +
                     ": expected a positive number of bytes with an optional K, M or G suffix");
  }
  const std::string_view suffix = text.substr(digits);
  const uint64_t mult = suffix_multiplier(suffix);
  if (mult == 0) {
    throw UsageError("invalid size " + shown + ": unknown suffix '" + std::string(suffix) +
                     "' (use K, M or G; 1K = 1024 bytes)");
  }
  uint64_t value = 0;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  for (size_t i = 0; i < digits; ++i) {
    const auto d = static_cast<uint64_t>(text[i] - '0');
    if (value > (kMax - d) / 10) throw UsageError("invalid size " + shown + ": too large");
    value = value * 10 + d;
  }
  if (value == 0) throw UsageError("invalid size " + shown + ": must be greater than zero");
  if (value > kMax / mult) throw UsageError("invalid size " + shown + ": too large");
  return value * mult;
}

SizeRange parse_size_range(std::string_view text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) {
    const uint64_t v = parse_byte_size(text);
    return SizeRange{v, v};
  }
  const SizeRange range{parse_byte_size(text.substr(0, colon)),
                        parse_byte_size(text.substr(colon + 1))};
  if (range.first > range.last) {
    throw UsageError("invalid size range '" + std::string(text) + "': the first size (" +
                     std::to_string(range.first) + " B) is larger than the last (" +
                     std::to_string(range.last) + " B)");
  }
  return range;
}

std::vector<uint64_t> expand_sizes(const SizeRange& range, uint64_t factor) {
  if (factor < 2) {
    throw UsageError("invalid step factor " + std::to_string(factor) + ": must be at least 2");
  }
  std::vector<uint64_t> sizes;
  for (uint64_t s = range.first;; s *= factor) {
    sizes.push_back(s);
    if (s > range.last / factor) break;  // next step would pass `last` (or overflow)
  }
  return sizes;
}

std::vector<PlannedSize> round_sizes(const std::vector<uint64_t>& sizes, uint64_t unit,
                                     std::vector<uint64_t>& dropped) {
  std::vector<PlannedSize> planned;
  for (const uint64_t s : sizes) {
    const uint64_t rounded = unit == 0 ? s : s - s % unit;
    if (rounded == 0) {
      dropped.push_back(s);
      continue;
    }
    const bool seen = std::any_of(planned.begin(), planned.end(),
                                  [&](const PlannedSize& p) { return p.bytes == rounded; });
    if (!seen) planned.push_back(PlannedSize{s, rounded});
  }
  return planned;
}

}  // namespace tessera::cli

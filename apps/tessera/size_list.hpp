// Byte sizes on the command line: "4096", "64K", "1M", "2G" (binary units,
// 1K = 1024), ranges "A:B" walked geometrically, and rounding of sizes to a
// multiple of a unit (element size, or element size x ranks).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace tessera::cli {

// Parses a positive byte count: decimal digits followed by an optional
// suffix K, M or G (either case; 1K = 1024), optionally followed by "B"
// ("64KB" and "64K" are the same). Throws UsageError naming `text` for an
// empty string, a sign, a fraction, an unknown suffix, zero, or a value that
// does not fit in 64 bits.
uint64_t parse_byte_size(std::string_view text);

// Inclusive range of sizes in bytes.
struct SizeRange {
  uint64_t first = 0;
  uint64_t last = 0;
};

// Parses "A:B" (or a single "A", meaning A:A) with parse_byte_size. Throws
// UsageError if A > B or either part is invalid.
SizeRange parse_size_range(std::string_view text);

// A, A*factor, A*factor^2, ... up to and including B. `factor` must be >= 2
// (throws UsageError otherwise). Never overflows.
std::vector<uint64_t> expand_sizes(const SizeRange& range, uint64_t factor);

// A requested size and what is actually run after rounding down to a
// multiple of the unit.
struct PlannedSize {
  uint64_t requested = 0;
  uint64_t bytes = 0;  // multiple of the unit; never 0
};

// Rounds each size down to a multiple of `unit` (> 0), drops sizes that
// become 0 and repeated sizes, and keeps the order. `dropped` receives the
// requested sizes that were smaller than one unit.
std::vector<PlannedSize> round_sizes(const std::vector<uint64_t>& sizes, uint64_t unit,
                                     std::vector<uint64_t>& dropped);

}  // namespace tessera::cli

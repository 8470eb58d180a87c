// Token-id files for the data tests, written into a test::TempDir.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "../support/temp_dir.hpp"

namespace tessera::test {

// Writes `ids` to `name` in `dir` as little-endian values of `width` bytes
// (2 or 4) and returns its path.
inline std::filesystem::path write_ids(const TempDir& dir, const std::string& name,
                                       const std::vector<uint32_t>& ids, int width) {
  std::vector<uint8_t> bytes;
  for (const uint32_t id : ids) {
    for (int b = 0; b < width; ++b) bytes.push_back(static_cast<uint8_t>((id >> (8 * b)) & 0xFFU));
  }
  return dir.write(name, bytes);
}

}  // namespace tessera::test

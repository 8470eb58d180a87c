// A temporary directory for test files, removed with everything in it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::test {

class TempDir {
 public:
  // Creates a fresh directory under the system temp dir; throws
  // std::runtime_error when that fails.
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  // Writes `bytes` to `name` inside the directory and returns its path.
  std::filesystem::path write(const std::string& name, const std::vector<uint8_t>& bytes) const;
  // Writes ids as little-endian values of `width` bytes (2 or 4).
  std::filesystem::path write_ids(const std::string& name, const std::vector<uint32_t>& ids,
                                  int width) const;

 private:
  std::filesystem::path path_;
};

}  // namespace tessera::test

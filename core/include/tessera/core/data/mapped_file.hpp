// A whole file mapped read-only into memory (POSIX mmap).
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>

namespace tessera {

class MappedFile {
 public:
  // Maps `path`. Throws tessera::Error (invalid argument) naming the file
  // when it does not exist, is not a regular file, cannot be opened or
  // mapped, or is empty.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  // The file's bytes; valid while this object lives.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  void release() noexcept;

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessera

// Opening the files a run reads (configs, data, checkpoints, initial
// weights, plugin libraries): only regular files are opened, so a FIFO, a
// socket, a device or a directory given where a file is expected is refused
// with a message instead of blocking in open() or reading forever.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tessera {

// What a file-type mode (stat's st_mode) is, for messages: "a regular
// file", "a directory", "a FIFO", "a socket", "a character device", "a
// block device", "a symbolic link" or "not a regular file".
std::string file_type_text(unsigned mode);

// Why `path` is not a regular file (following symbolic links): "" when it
// is one, else "does not exist", "is a FIFO, not a regular file", or
// "cannot be examined: <strerror>". Never throws.
std::string regular_file_problem(const std::filesystem::path& path) noexcept;

// Opens `path` read-only if it is a regular file (following symbolic
// links). Returns the descriptor (close-on-exec, blocking reads) and its
// size, or -1 with `problem` saying why, worded to follow the path in a
// message: "does not exist", "is a FIFO, not a regular file", "cannot be
// opened: Permission denied". The type is checked before open() and again
// on the open descriptor; open() itself runs with O_NONBLOCK, so a FIFO
// swapped in between the two cannot block it. Never throws.
int open_regular_file(const std::filesystem::path& path, uint64_t& size,
                      std::string& problem) noexcept;

// A regular file open for reading. Reads go through pread() on the
// descriptor, so a file that shrinks while it is open gives a short read
// (reported by the caller) instead of a SIGBUS, and several threads may read
// at once.
class InputFile {
 public:
  // Opens `path` (see open_regular_file). Throws tessera::Error (invalid
  // argument) "<what> '<path>' <problem>", e.g. "data file 'x.bin' is a
  // FIFO, not a regular file".
  InputFile(const std::filesystem::path& path, std::string_view what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  // Size in bytes when opened.
  [[nodiscard]] uint64_t size() const noexcept { return size_; }
  // Size in bytes now (fstat). Throws tessera::Error naming the file and
  // strerror if fstat fails.
  [[nodiscard]] uint64_t current_size() const;
  // Reads up to `count` bytes at `offset` into `out`, retrying short reads
  // and EINTR; returns the number read, less than `count` only at the end
  // of the file. Throws tessera::Error (internal) "<what> '<path>': read
  // error at byte <offset>: <strerror>" on a failed read.
  size_t read_at(uint64_t offset, void* out, size_t count) const;

 private:
  void release() noexcept;

  std::filesystem::path path_;
  std::string what_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole content of the regular file `path`. Throws tessera::Error
// (invalid argument) "<what> '<path>' ..." for everything InputFile refuses,
// and for a file of more than `max_bytes` bytes ("is 17179869184 bytes,
// more than the limit of 16777216"), checked before reading and while
// reading (a file that grows meanwhile); a read error names the file and
// strerror.
std::string read_input_file(const std::filesystem::path& path, std::string_view what,
                            uint64_t max_bytes);

}  // namespace tessera

// Crash-safe replacement of a file: the new content is written to a temporary
// file next to the target, flushed to disk, and renamed over the target, so a
// reader (or a restart after a crash) sees either the old file or the new one,
// never a mix.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string_view>

namespace tessera {

// Write end of the temporary file handed to a write_file_atomically callback.
// Writes go straight to the file descriptor (no user-space buffer), so large
// tensors are streamed without an extra copy.
class AtomicFileSink {
 public:
  // Appends `size` bytes from `data`, retrying short writes and EINTR.
  // Throws tessera::Error naming the temporary file and strerror on failure.
  void write(const void* data, size_t size);
  void write(std::span<const std::byte> bytes) { write(bytes.data(), bytes.size()); }
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Bytes written so far.
  [[nodiscard]] size_t bytes_written() const noexcept { return written_; }

 private:
  friend void write_file_atomically(const std::filesystem::path&,
                                    const std::function<void(AtomicFileSink&)>&);
  AtomicFileSink(int fd, const std::filesystem::path& temp_path) : fd_(fd), temp_path_(temp_path) {}

  int fd_;
  const std::filesystem::path& temp_path_;
  size_t written_ = 0;
};

// Replaces `path` with whatever `produce` writes into the sink:
//   1. creates `<path>.tmp.<pid>.<random>` in the same directory (exclusive,
//      mode 0644 before umask),
//   2. runs `produce`, fsyncs and closes the temporary file,
//   3. renames it over `path` (atomic on POSIX file systems),
//   4. fsyncs the directory so the rename itself survives a power loss.
// If any step fails, or `produce` throws, the temporary file is removed and
// `path` is left exactly as it was (absent or with its previous content).
// System-call failures throw tessera::Error naming the path and strerror; an
// exception thrown by `produce` is rethrown unchanged. A process killed
// mid-write can leave a stale `<path>.tmp.*` file behind, never a partial
// `path`; remove_stale_temp_files() cleans those up.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(AtomicFileSink&)>& produce);

// Same, with the whole content given as bytes.
void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes);

// Same, with the whole content given as text (written verbatim).
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

// Whether `name` (a file name, no directory) has the form of the temporary
// files write_file_atomically creates: `<target>.tmp.<pid>.<16 hex digits>`
// with a non-empty target.
bool is_atomic_temp_name(std::string_view name) noexcept;

// Removes temporary files that an interrupted write_file_atomically of `path`
// left in its directory (`<filename>.tmp.*`). Returns how many were removed.
// Must not run while another process is writing `path`. A missing directory
// counts as nothing to remove; other file-system errors throw tessera::Error.
size_t remove_stale_temp_files(const std::filesystem::path& path);

}  // namespace tessera
